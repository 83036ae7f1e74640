// bvlua runs on jemalloc (linked into the executable: CMakeLists.txt), configured here.
//
// Why: a training step allocates and frees the same large tensors every step. glibc's malloc
// hands blocks over 32 MiB (and, as its threshold moves, smaller ones) back to the kernel with
// munmap, so every step faults them in again, page by page: training BiT-R26 at 224 px on 2
// threads took ~100,000 minor page faults a second and spent 40% of its CPU time in the kernel.
// jemalloc keeps freed pages for reuse.
//
// The settings:
// - dirty_decay_ms, muzzy_decay_ms: freed pages are never returned to the kernel. The process
//   keeps its peak, as PyTorch's CUDA caching allocator does on a GPU. A long but finite decay
//   time does not do instead: with one, jemalloc 5.3 gives a freed block of about 7 MB or more
//   back at once, whatever the time (a 7.6 MB tensor allocated, freed and allocated again took
//   1,866 page faults each time under dirty_decay_ms:10000 or 60000, 9 with -1), and BiT-R26's
//   step (224 px, batch 32, 2 threads) took 2.7 million minor faults instead of 11,000, a third
//   of its CPU time in the kernel.
// - lg_extent_max_active_fit: jemalloc merges a freed block of 16 KiB or more with the free
//   blocks beside it, and by default (6) splits a free block only for a request of at least
//   1/64 of its size. With decay off nothing else takes such a merged block back: reading a
//   dataset, the 100 KB records a batch frees together merged into free blocks of 16-67 MB that
//   no later record could use, and the peak RSS grew by 1.8 times the data read (+370 MB for
//   200 MB, +720 MB for 400 MB: scripts/tfrecord_rss.lua). 32 lets a request split any free
//   block (the smallest that fits is still taken first): +60 MB for either, and training's page
//   faults and peak stay as they were (tests/cli/tfrecord_memory_test.sh checks the reading).
// MALLOC_CONF in the environment still applies on top of these (jemalloc reads this string
// first), e.g. MALLOC_CONF=dirty_decay_ms:10000 to give memory back.
extern "C" {
// jemalloc reads this symbol at start-up (its documented `malloc_conf` global).
__attribute__((used))
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1,lg_extent_max_active_fit:32";
}
