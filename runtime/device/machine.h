// What bvlua runs on: libtorch's version, CUDA, and the intra-op thread count. libtorch
// starts with one thread unless told otherwise, so bvlua sets it at start-up.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bv {

std::string torch_version();
// Whether this bvlua was built with CUDA (libtorch_cuda linked, CUDA code paths compiled).
bool cuda_compiled();
// Whether a CUDA GPU can be used now (false on a CPU-only build or a machine without a GPU).
bool cuda_available();
int cuda_device_count();
// The device a process trains on, from what the user asked for (`--device`, config.device):
// "auto" (or "") is cuda:LOCAL_RANK when a GPU is available, else "cpu"; "cpu"; "cuda" is
// cuda:(LOCAL_RANK modulo the visible GPUs); "cuda:N"; "fake" (fake:(LOCAL_RANK % 2)) or
// "fake:N", the test device (device/fake_device.h), with BV_TEST_DEVICE=1. Asking for a GPU that is
// not there is a bv::Error saying why (no CUDA compiled in, no GPU, or fewer GPUs than N + 1),
// never a silent CPU run.
std::string resolve_device(const std::string& spec, int local_rank);
// Makes `device` (resolve_device's answer) this process's current device: a process sets it
// before its first allocation, or CUDA makes a context on GPU 0 for the first pinned batch.
// Nothing for the CPU.
void set_current_device(const std::string& device);
// The device's memory as its caching allocator counts it, under JAX's names (big_vision logs
// them as y/devmem/dev0/<name>): bytes_in_use, peak_bytes_in_use, bytes_reserved,
// peak_bytes_reserved. Empty for the CPU, which has no such allocator.
std::vector<std::pair<std::string, int64_t>> device_memory_stats(const std::string& device);
int cpu_cores();
// The host memory this process can still take, in bytes: /proc/meminfo's MemAvailable, or less
// when a cgroup limit (v2 memory.max, v1 memory.limit_in_bytes) leaves less; -1 when unknown.
// What the input pipeline checks a batch's buffers against before it builds them.
int64_t host_memory_available();
// `bytes` for a message: "512 bytes", "12.3 KB", "4.0 GB" (powers of 1000).
std::string bytes_string(double bytes);
// What this process has cost so far (getrusage): CPU time in user and kernel mode, page faults
// (minor: a page mapped without I/O, the price of memory freed to the OS and touched again) and
// the peak resident set. The benchmarks print them next to the step time.
struct ProcessUsage {
  double user_s = 0, system_s = 0;
  int64_t minor_faults = 0, major_faults = 0, max_rss_bytes = 0;
};
ProcessUsage process_usage();
// The malloc this process runs on: "jemalloc X.Y.Z" when bvlua is linked with it (it is: see
// bindings/malloc_conf.cpp), else "glibc".
std::string malloc_name();
void set_threads(int n);
// For worker threads (the input pipeline): this thread's ops run on one intra-op thread, so
// several workers don't each start a team of spinning OpenMP threads on the same cores.
void use_one_thread_here();
int get_threads();

}  // namespace bv
