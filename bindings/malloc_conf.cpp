// bvlua runs on jemalloc (linked into the executable: CMakeLists.txt), configured here.
//
// Why: a training step allocates and frees the same large tensors every step. glibc's malloc
// hands blocks over 32 MiB (and, as its threshold moves, smaller ones) back to the kernel with
// munmap, so every step faults them in again, page by page: training BiT-R26 at 224 px on 2
// threads took ~100,000 minor page faults a second and spent 40% of its CPU time in the kernel
// (issue 20). jemalloc keeps freed pages for reuse.
//
// The settings: freed pages are never returned to the kernel on a timer (the decay times; a
// slow CPU step lasts longer than jemalloc's default 10 s, after which a step would fault its
// memory in again). The process keeps its peak, as PyTorch's CUDA caching allocator does on a
// GPU. MALLOC_CONF in the environment still applies on top of these (jemalloc reads this string
// first), e.g. MALLOC_CONF=dirty_decay_ms:10000 to give memory back.
extern "C" {
// jemalloc reads this symbol at start-up (its documented `malloc_conf` global).
__attribute__((used)) const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1";
}
