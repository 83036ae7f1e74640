// What bvlua runs on: libtorch's version, CUDA, and the intra-op thread count. Debian's libtorch
// starts with one thread unless told otherwise, so bvlua sets it at start-up.
#pragma once

#include <string>

namespace bv {

std::string torch_version();
bool cuda_available();
int cuda_device_count();
int cpu_cores();
void set_threads(int n);
// For worker threads (the input pipeline): this thread's ops run on one intra-op thread, so
// several workers don't each start a team of spinning OpenMP threads on the same cores.
void use_one_thread_here();
int get_threads();

}  // namespace bv
