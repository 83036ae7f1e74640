#include "device/machine.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/api/include/torch/version.h>

#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "device/fake_device.h"

namespace bv {

std::string torch_version() { return TORCH_VERSION; }

bool cuda_compiled() {
#if defined(BV_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

bool cuda_available() { return cuda_compiled() && at::hasCUDA(); }

int cuda_device_count() { return at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : 0; }

std::string resolve_device(const std::string& spec, int local_rank) {
  if (spec.empty() || spec == "auto") {
    return cuda_available() ? resolve_device("cuda", local_rank) : "cpu";
  }
  if (spec == "cpu") return "cpu";
  if (spec == "fake" || spec.rfind("fake:", 0) == 0) {
    const char* allowed = std::getenv("BV_TEST_DEVICE");
    BV_CHECK(allowed && std::string(allowed) == "1", "device '", spec,
             "' is the test device (the CPU's kernels, as strict as CUDA; device/fake_device.h): "
             "set BV_TEST_DEVICE=1 to use it");
    BV_CHECK(spec == "fake" || spec == "fake:0" || spec == "fake:1", "device '", spec,
             "': the test device has fake:0 and fake:1");
    enable_fake_device();
    // Two devices, so that a process's local rank picks one as it picks a GPU.
    return spec == "fake" ? str("fake:", local_rank % 2) : spec;
  }
  int index = local_rank;
  if (spec != "cuda") {
    size_t used = 0;
    bool numbered = spec.rfind("cuda:", 0) == 0 && spec.size() > 5;
    if (numbered) {
      try {
        index = std::stoi(spec.substr(5), &used);
      } catch (const std::exception&) {
        numbered = false;
      }
    }
    BV_CHECK(numbered && used == spec.size() - 5 && index >= 0, "device '", spec,
             "' is not one of auto, cpu, cuda, cuda:N");
  }
  BV_CHECK(cuda_compiled(), "device '", spec,
           "': CUDA is not compiled into this bvlua (a CPU-only build: -DBV_CUDA=OFF or a CPU "
           "wheel); use --device cpu, or rebuild with CUDA (scripts/setup)");
  int count = cuda_device_count();
  BV_CHECK(count > 0, "device '", spec,
           "': no CUDA GPU is available here (libtorch sees 0 devices); use --device cpu to "
           "train on the CPU");
  // "cuda" and "auto": the local rank's GPU, modulo the visible ones (slurm binds one GPU per
  // task, so every process sees one device and has its own local rank).
  if (spec == "cuda") index = local_rank % count;
  BV_CHECK(index < count, "device '", spec, "' (local rank ", local_rank, "): there ",
           count == 1 ? "is 1 GPU" : str("are ", count, " GPUs"),
           " here, cuda:0 to cuda:", count - 1);
  return str("cuda:", index);
}

void set_current_device(const std::string& device) {
  c10::Device d(device);
  if (d.is_cpu()) return;
  c10::impl::VirtualGuardImpl(d.type()).setDevice(d);
}

std::vector<std::pair<std::string, int64_t>> device_memory_stats(const std::string& device) {
  c10::Device d(device);
  if (d.is_cpu()) return {};
  // (bv.memory initialises CUDA's allocator first: bindings/state.cpp.)
  auto stats = c10::getDeviceAllocator(d.type())->getDeviceStats(d.index() < 0 ? 0 : d.index());
  const auto& in_use = stats.allocated_bytes[0];  // StatType::AGGREGATE
  const auto& reserved = stats.reserved_bytes[0];
  return {{"bytes_in_use", in_use.current},
          {"peak_bytes_in_use", in_use.peak},
          {"bytes_reserved", reserved.current},
          {"peak_bytes_reserved", reserved.peak}};
}

int cpu_cores() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {

// The first number in the file at `path`, or -1 when it cannot be read or holds none ("max").
int64_t read_number(const char* path) {
  std::ifstream in(path);
  long long v = -1;
  if (!(in >> v)) return -1;
  return v;
}

// /proc/meminfo's MemAvailable in bytes, or -1.
int64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string name;
  long long kb = 0;
  std::string unit;
  while (in >> name >> kb >> unit) {
    if (name == "MemAvailable:") return kb * 1024;
  }
  return -1;
}

// A field of a cgroup's memory.stat ("inactive_file 123"), or 0.
int64_t stat_field(const char* path, const std::string& field) {
  std::ifstream in(path);
  std::string name;
  long long value = 0;
  while (in >> name >> value) {
    if (name == field) return value;
  }
  return 0;
}

// What a cgroup limit leaves, or -1 without a limit. The usage counts the page cache, which the
// kernel takes back under pressure: its inactive part (files read once, e.g. the data) is left
// out, as the kernel's own "available" figure leaves it out.
int64_t cgroup_left() {
  struct Files {
    const char *limit, *usage, *stat, *inactive_file;
  };
  const Files kFiles[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat",
       "inactive_file"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
       "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"}};
  for (const Files& f : kFiles) {
    int64_t limit = read_number(f.limit), usage = read_number(f.usage);
    // (v1 reports "no limit" as a huge number, which the meminfo figure undercuts)
    if (limit > 0 && usage >= 0) {
      usage = std::max<int64_t>(0, usage - stat_field(f.stat, f.inactive_file));
      return limit > usage ? limit - usage : 0;
    }
  }
  return -1;
}

}  // namespace

int64_t host_memory_available() {
  int64_t avail = mem_available(), left = cgroup_left();
  if (avail < 0) return left;
  return left < 0 ? avail : std::min(avail, left);
}

std::string bytes_string(double bytes) {
  static const char* const kUnits[] = {"KB", "MB", "GB", "TB", "PB", "EB"};
  if (bytes < 1000) return str(static_cast<int64_t>(bytes), " bytes");
  int unit = -1;
  while (bytes >= 1000 && unit < 5) {
    bytes /= 1000;
    ++unit;
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << bytes << " " << kUnits[unit];
  return out.str();
}

void set_threads(int n) {
  BV_CHECK(n >= 1, "thread count must be at least 1, got ", n);
  at::set_num_threads(n);
  // Marks this thread's count as initialised: a later use_one_thread_here() in another thread
  // changes libtorch's shared default, which must not reach this thread lazily.
  at::internal::lazy_init_num_threads();
}

void use_one_thread_here() {
  at::internal::lazy_init_num_threads();
  at::set_num_threads(1);
}

int get_threads() { return at::get_num_threads(); }

ProcessUsage process_usage() {
  struct rusage ru {};
  BV_CHECK(getrusage(RUSAGE_SELF, &ru) == 0, "getrusage failed");
  ProcessUsage u;
  u.user_s = static_cast<double>(ru.ru_utime.tv_sec) + ru.ru_utime.tv_usec * 1e-6;
  u.system_s = static_cast<double>(ru.ru_stime.tv_sec) + ru.ru_stime.tv_usec * 1e-6;
  u.minor_faults = ru.ru_minflt;
  u.major_faults = ru.ru_majflt;
  u.max_rss_bytes = static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
  return u;
}

std::string malloc_name() {
  // jemalloc's control interface; looked up rather than linked so the runtime does not depend
  // on which malloc the executable brings.
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  if (mallctl == nullptr) return "glibc";
  const char* version = nullptr;
  size_t size = sizeof(version);
  if (mallctl("version", &version, &size, nullptr, 0) != 0 || version == nullptr) {
    return "jemalloc";
  }
  std::string v = version;  // "5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c"
  return "jemalloc " + v.substr(0, v.find('-'));
}

}  // namespace bv
