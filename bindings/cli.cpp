// `bvlua --version` from what the build compiled in and what the GPU driver says, without
// libtorch: loading libtorch takes about 0.6 s (its operator registrations and the CUDA
// libraries it links), longer than the answer should.
//
// What is compiled in comes from the headers bvlua was built against, which are the wheel's own
// (CMakeLists.txt): torch's version header, its nvidia-* packages' CUDA runtime and NCCL headers.
// Whether a GPU is available is asked of the driver (libcuda, loaded only here and only if it is
// installed), by the rule libtorch follows through the CUDA runtime: at least one device, and a
// driver of the runtime's major version or newer (CUDA's minor-version compatibility). A driver
// too old for the runtime is named, since libtorch would only say it sees no GPU.
#include "cli.h"

#include <dlfcn.h>
#include <torch/headeronly/version.h>

#include <cstdio>
#include <cstdlib>

#if defined(BV_WITH_CUDA)
#include <cuda_runtime_api.h>  // CUDART_VERSION: the runtime libtorch_cuda was built with
#endif
#if defined(USE_C10D_NCCL)
#include <nccl.h>  // NCCL_MAJOR ...: the wheel's NCCL, the library libtorch_cuda loads
#endif

namespace bv {

namespace {

struct DriverGpus {
  int count = 0;           // devices the driver shows (CUDA_VISIBLE_DEVICES applies)
  int driver_version = 0;  // e.g. 13000 for 13.0; 0 without a driver
};

DriverGpus driver_gpus() {
  DriverGpus out;
  // Never closed: the driver does not expect to be unloaded, and the process ends soon.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return out;
  using InitFn = int (*)(unsigned int);  // CUresult (0: CUDA_SUCCESS) cuInit(flags)
  using IntOutFn = int (*)(int*);        // cuDeviceGetCount, cuDriverGetVersion
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<IntOutFn>(dlsym(lib, "cuDeviceGetCount"));
  auto version = reinterpret_cast<IntOutFn>(dlsym(lib, "cuDriverGetVersion"));
  if (version == nullptr || version(&out.driver_version) != 0) out.driver_version = 0;
  if (init == nullptr || count == nullptr || init(0) != 0 || count(&out.count) != 0) out.count = 0;
  return out;
}

}  // namespace

bool parse_threads(const std::string& text, int* out) {
  char* end = nullptr;
  long n = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || n < 1 || n > 4096) return false;
  *out = static_cast<int>(n);
  return true;
}

void print_version() {
  std::printf("bvlua %s\nlibtorch %s\n", BV_VERSION, TORCH_VERSION);
  bool gpu = false;
#if defined(BV_WITH_CUDA)
  std::printf("cuda %d.%d: compiled in; ", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  DriverGpus d = driver_gpus();
  bool driver_ok = d.driver_version / 1000 >= CUDART_VERSION / 1000;
  gpu = d.count > 0 && driver_ok;
  if (gpu) {
    std::printf("%d GPU(s) available\n", d.count);
  } else if (d.count > 0) {
    std::printf("no GPU available (the driver, CUDA %d.%d, is older than the runtime's %d.x)\n",
                d.driver_version / 1000, (d.driver_version % 1000) / 10, CUDART_VERSION / 1000);
  } else {
    std::printf("no GPU available\n");
  }
#else
  std::printf("cuda: not compiled in (a CPU-only build)\n");
#endif
#if defined(USE_C10D_NCCL)
  std::printf("nccl %d.%d.%d: compiled in\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  std::printf("nccl: not compiled in\n");
#endif
  // What `bvlua train` trains on without --device (rank 0's; rank r takes cuda:r).
  std::printf("device: %s (train's default; --device to choose)\n", gpu ? "cuda:0" : "cpu");
}

}  // namespace bv
