// The fake device (device/fake_device.h): PrivateUse1 with two devices whose memory the host
// cannot read, a guard with streams and events that are asynchronous (device/fake_streams.h), its
// own generators, the kernels that make, copy and view tensors, and a fallback for every other
// op that refuses what CUDA refuses (a CPU tensor or a CPU generator among device tensors,
// tensors on two devices, a tensor another stream is still writing) and then runs the CPU's
// kernel.
#include "device/fake_device.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "device/fake_streams.h"

namespace bv {

namespace {

constexpr c10::DeviceType kFake = c10::DeviceType::PrivateUse1;
constexpr int kDevices = 2;

// --- The current device -------------------------------------------------------------------------
// Process-wide, as bvlua uses CUDA's (one device per process). `expected`: the device a process
// with LOCAL_RANK set must use (LOCAL_RANK % 2); -1 when LOCAL_RANK is unset. An allocation on
// another device is an error: on CUDA it would make a context on that GPU (device 0 from every
// rank, when a tensor is made before the device is set).
std::atomic<int> current_index{0};
std::atomic<bool> device_set{false};
std::atomic<int> expected_index{-1};

void check_index(int index) {
  TORCH_CHECK(index >= 0 && index < kDevices, "fake device: fake:", index,
              " does not exist (there are ", kDevices, ": fake:0 and fake:1)");
}

const char* local_rank_text() {
  const char* v = std::getenv("LOCAL_RANK");
  return v && *v ? v : "unset";
}

void check_allowed(int index, const char* what) {
  int want = expected_index;
  TORCH_CHECK(want < 0 || index == want, "fake device: ", what, " on fake:", index,
              " in a process whose device is fake:", want, " (LOCAL_RANK=", local_rank_text(),
              "): ",
              device_set ? "a tensor was put on another process's device"
                         : "the process did not set its device before its first allocation",
              " (on CUDA this makes a context on that GPU)");
}

// --- Device memory the host cannot read ---------------------------------------------------------
// A fake tensor's data_ptr() is its host memory's address plus 2^52: not an address the host can
// read on x86-64 or arm64, so a memcpy from it or a host read of it crashes, as a CUDA pointer
// does. Only the fake device's own kernels (copies, the CPU fallback's copies, item()) undo the
// bias.
constexpr uintptr_t kBias = uintptr_t(1) << 52;

void* device_address(void* host) {
  return host ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) + kBias) : nullptr;
}

void* host_address(const void* device) {
  return device ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(device) - kBias) : nullptr;
}

// Counts its bytes per device as a GPU's caching allocator does (in use and peak; nothing is
// cached, so reserved is in use), so that device-memory metrics have something to show.
struct FakeAllocator final : c10::DeviceAllocator {
  struct Block {
    void* data;  // host address
    size_t bytes;
    int index;
  };
  static void free_block(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    fake::forget(device_address(block->data));  // a queued copy may still write it
    instance().count(block->index, -static_cast<int64_t>(block->bytes));
    c10::free_cpu(block->data);
    delete block;
  }
  static FakeAllocator& instance();

  // The device the next allocation of this thread goes to (fake_empty sets it from its device
  // argument); -1: the current device.
  static thread_local int alloc_index;

  c10::DataPtr allocate(size_t n) override {
    int index = alloc_index >= 0 ? alloc_index : current_index.load();
    check_allowed(index, "an allocation");
    void* p = c10::alloc_cpu(n);
    count(index, static_cast<int64_t>(n));
    return {device_address(p), new Block{p, n, index}, &free_block,
            c10::Device(kFake, static_cast<c10::DeviceIndex>(index))};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(host_address(dest), host_address(src), count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex d) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_[checked(d)];
  }
  void resetAccumulatedStats(c10::DeviceIndex d) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& st = stats_[checked(d)];
    for (auto* s : {&st.allocated_bytes[0], &st.reserved_bytes[0]}) s->reset_accumulated();
  }
  void resetPeakStats(c10::DeviceIndex d) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& st = stats_[checked(d)];
    for (auto* s : {&st.allocated_bytes[0], &st.reserved_bytes[0]}) s->reset_peak();
  }

 private:
  void count(int index, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& st = stats_[index];
    for (auto* s : {&st.allocated_bytes[0], &st.reserved_bytes[0]}) {
      if (bytes >= 0) s->increase(static_cast<size_t>(bytes));
      else s->decrease(static_cast<size_t>(-bytes));
    }
  }
  // A device's index (-1: the current one), checked.
  static int checked(c10::DeviceIndex d) {
    int i = d < 0 ? current_index.load() : d;
    check_index(i);
    return i;
  }
  std::mutex mutex_;
  c10::CachingDeviceAllocator::DeviceStats stats_[kDevices];
};

thread_local int FakeAllocator::alloc_index = -1;
FakeAllocator fake_allocator;
FakeAllocator& FakeAllocator::instance() { return fake_allocator; }
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &fake_allocator);

// --- Streams and events (device/fake_streams.h)
// ---------------------------------------------------
struct FakeEvent {
  fake::StreamId stream = 0;
  uint64_t seq = 0;  // the stream's queued work when recorded
};

c10::Stream make_stream(c10::Device d, fake::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, d, id);
}

struct FakeGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kFake; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() >= 0 && d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kFake, static_cast<c10::DeviceIndex>(current_index.load()));
  }
  void setDevice(c10::Device d) const override {
    if (d.index() < 0) return;
    check_index(d.index());
    current_index = d.index();
    device_set = true;
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0 && d.index() < kDevices) current_index = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    return make_stream(d, fake::current_stream());
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return make_stream(d, 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return make_stream(d, fake::pool_stream());
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return make_stream(d, fake::pool_stream());
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return make_stream(s.device(), fake::exchange_stream(s.id()));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return kDevices; }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex,
              const c10::EventFlag) const override {
    if (!*event) *event = new FakeEvent;
    auto* e = static_cast<FakeEvent*>(*event);
    e->stream = stream.id();
    e->seq = fake::queued(stream.id());
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;  // never recorded: nothing to wait for, as on CUDA
    auto* e = static_cast<FakeEvent*>(event);
    fake::order(stream.id(), e->stream, e->seq);
  }
  bool queryEvent(void* event) const override {
    if (!event) return true;
    auto* e = static_cast<FakeEvent*>(event);
    return fake::done(e->stream, e->seq);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<FakeEvent*>(event);
  }
  void synchronizeEvent(void* event) const override {
    if (!event) return;
    auto* e = static_cast<FakeEvent*>(event);
    fake::host_sync(e->stream, e->seq);
  }
  bool queryStream(const c10::Stream& s) const override {
    return fake::done(s.id(), fake::queued(s.id()));
  }
  void synchronizeStream(const c10::Stream& s) const override {
    fake::host_sync(s.id(), fake::queued(s.id()));
  }
  void synchronizeDevice(const c10::DeviceIndex) const override { fake::host_sync_all(); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void*, void*, const c10::DeviceIndex) const override { return 0; }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, FakeGuard);

// --- Pinned host memory -------------------------------------------------------------------------
// As CUDA's host allocator hands out for asynchronous copies: here plain host memory whose
// pointers are remembered, so that Tensor::is_pinned() says which it is. Like CUDA's, it belongs
// to the current device: allocating it before a process with LOCAL_RANK set its device is the
// error that makes a CUDA context on GPU 0 from every rank.
struct FakePinnedAllocator final : c10::Allocator {
  std::mutex mu;
  std::set<const void*> live;

  static void release(void* ptr);
  c10::DataPtr allocate(size_t n) override {
    TORCH_CHECK(expected_index < 0 || device_set,
                "fake device: pinned host memory was allocated "
                "before this process (LOCAL_RANK=",
                local_rank_text(),
                ") set its "
                "device; on CUDA that makes a context on GPU 0 from every process");
    void* ptr = n ? c10::alloc_cpu(n) : nullptr;
    if (ptr) {
      std::lock_guard<std::mutex> lock(mu);
      live.insert(ptr);
    }
    return {ptr, ptr, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  bool pinned(const void* ptr) {
    std::lock_guard<std::mutex> lock(mu);
    return live.count(ptr) > 0;
  }
};

FakePinnedAllocator fake_pinned;

void FakePinnedAllocator::release(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(fake_pinned.mu);
    fake_pinned.live.erase(ptr);
  }
  c10::free_cpu(ptr);
}

bool is_pinned(const at::Tensor& t) {
  return t.is_cpu() && t.storage().data() && fake_pinned.pinned(t.storage().data());
}

// --- Generators ---------------------------------------------------------------------------------
// A device generator, as CUDA has its own (CUDA kernels refuse a CPU one): it holds a CPU
// generator (mt19937), which the fallback hands to the CPU kernel in its place. Its state is the
// CPU generator's.
struct FakeGenerator final : c10::GeneratorImpl {
  at::Generator cpu;

  FakeGenerator(c10::DeviceIndex index, uint64_t seed)
      : c10::GeneratorImpl(c10::Device(kFake, index),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        cpu(at::make_generator<at::CPUGeneratorImpl>(seed)) {}
  void set_current_seed(uint64_t seed) override { cpu.set_current_seed(seed); }
  void set_offset(uint64_t offset) override { cpu.set_offset(offset); }
  uint64_t get_offset() const override { return cpu.get_offset(); }
  uint64_t current_seed() const override { return cpu.current_seed(); }
  uint64_t seed() override { return cpu.seed(); }
  void set_state(const c10::TensorImpl& state) override {
    cpu.unsafeGetGeneratorImpl()->set_state(state);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    return cpu.unsafeGetGeneratorImpl()->get_state();
  }

 private:
  FakeGenerator* clone_impl() const override {
    auto* g = new FakeGenerator(device().index(), 0);
    g->cpu = cpu.clone();
    return g;
  }
};

at::Generator new_fake_generator(c10::DeviceIndex index, uint64_t seed) {
  return at::make_generator<FakeGenerator>(index, seed);
}

const at::Generator& default_fake_generator(c10::DeviceIndex index) {
  static at::Generator gens[kDevices] = {new_fake_generator(0, c10::default_rng_seed_val),
                                         new_fake_generator(1, c10::default_rng_seed_val)};
  int i = index < 0 ? current_index.load() : index;
  check_index(i);
  return gens[i];
}

// What libtorch asks a backend about itself (the autograd engine: is there a context to run on).
struct FakeHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return kDevices; }
  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(kFake, static_cast<c10::DeviceIndex>(current_index.load()));
  }
  bool isPinnedPtr(const void* ptr) const override { return fake_pinned.pinned(ptr); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &fake_pinned; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_fake_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_fake_generator(
        index < 0 ? static_cast<c10::DeviceIndex>(current_index.load()) : index,
        c10::default_rng_seed_val);
  }
};

// --- Kernels ------------------------------------------------------------------------------------
int index_of(std::optional<c10::Device> device) {
  return device && device->has_index() ? device->index() : -1;
}

// Allocations from the factory functions go to the device they name (else the current one).
struct AllocOn {
  int saved;
  explicit AllocOn(int index) : saved(FakeAllocator::alloc_index) {
    if (index >= 0) check_index(index);
    FakeAllocator::alloc_index = index;
  }
  ~AllocOn() { FakeAllocator::alloc_index = saved; }
};

at::Tensor fake_empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                      std::optional<c10::Layout>, std::optional<c10::Device> device,
                      std::optional<bool>, std::optional<c10::MemoryFormat> memory_format) {
  AllocOn on(index_of(device));
  return at::detail::empty_generic(size, &fake_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor fake_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                              std::optional<c10::ScalarType> dtype, std::optional<c10::Layout>,
                              std::optional<c10::Device> device, std::optional<bool>) {
  AllocOn on(index_of(device));
  return at::detail::empty_strided_generic(size, stride, &fake_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// The same memory seen as a CPU tensor, for the fake device's own kernels only.
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().type() != kFake) return t;
  return at::from_blob(host_address(t.data_ptr()), t.sizes(), t.strides(),
                       t.options().device(at::kCPU));
}

const void* storage_key(const at::Tensor& t) { return t.storage().data(); }

std::string describe(const at::Tensor& t) {
  std::ostringstream s;
  s << "a " << t.scalar_type() << " tensor " << t.sizes() << " on " << t.device();
  return s.str();
}

// Before an op on the current stream touches fake tensor `t` (device/fake_streams.h).
void check_use(const at::Tensor& t, const std::string& op) {
  if (t.defined() && t.device().type() == kFake) fake::check_use(storage_key(t), op, describe(t));
}

// A copy to, from or within the fake device (the CPU fallback's copies come here too). It is
// queued on the stream, to run later, when a GPU would run it asynchronously
// (device/fake_streams.h); otherwise it runs now, after the stream's queued work.
at::Tensor fake_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  check_use(self, "copy_");
  check_use(dst, "copy_");
  fake::StreamId stream = fake::current_stream();
  bool pinned = is_pinned(self) || is_pinned(dst);
  bool pageable = (self.is_cpu() && !is_pinned(self)) || (dst.is_cpu() && !is_pinned(dst));
  if (stream == 0 && !(non_blocking && pinned)) {
    host_alias(dst).copy_(host_alias(self));
    return dst;
  }
  // Pageable host memory is read (or written) at the call, as cudaMemcpyAsync does with it: a
  // host source is copied now, a host destination is waited for before returning.
  at::Tensor from = self.is_cpu() && !is_pinned(self) ? self.clone() : self;
  at::Tensor src_alias = host_alias(from), dst_alias = host_alias(dst);
  const void* writes = dst.device().type() == kFake ? storage_key(dst) : nullptr;
  uint64_t seq = fake::enqueue(
      stream, writes, [from, dst, src_alias, dst_alias]() mutable { dst_alias.copy_(src_alias); });
  if (pageable && dst.is_cpu()) fake::host_sync(stream, seq);
  return dst;
}

at::Tensor fake_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes());
  return fake_copy_from(self, dst, false);
}

// item(): the host waits for the current stream (as cudaStreamSynchronize in CUDA's).
c10::Scalar fake_local_scalar_dense(const at::Tensor& t) {
  check_use(t, "item");
  return at::native::_local_scalar_dense_cpu(host_alias(t));
}

// An op that draws from the default generator without taking one (native_dropout, which
// at::dropout calls on an accelerator): on CUDA it draws from CUDA's default generator, so here
// the CPU kernel runs with the fake device's default generator's state in the CPU's default one,
// and the CPU's own state is put back after.
void run_with_device_generator(const c10::OperatorHandle& op, torch::jit::Stack* stack, int index) {
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  at::Generator device =
      static_cast<FakeGenerator*>(
          default_fake_generator(static_cast<c10::DeviceIndex>(index)).unsafeGetGeneratorImpl())
          ->cpu;
  auto state_of = [](at::Generator& g) {
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.get_state();
  };
  auto set_state = [](at::Generator& g, const at::Tensor& state) {
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  };
  at::Tensor saved = state_of(cpu);
  set_state(cpu, state_of(device));
  at::native::cpu_fallback(op, stack);
  set_state(device, state_of(cpu));
  set_state(cpu, saved);
}

bool is_generator_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  auto opt = type->cast<c10::OptionalType>();
  return opt && opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// The CPU fallback, refusing what a CUDA kernel refuses: a CPU tensor among the arguments (0-dim
// ones stand for scalars, which every device accepts), tensors on both fake devices, a generator
// of another device; and waiting for or refusing tensors that streams are still writing. A fake
// generator (or none: the device's default one, as a CUDA kernel takes CUDA's) is handed to the
// CPU kernel as the CPU generator it holds.
void strict_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const std::string& name = op.schema().name();
  int index = -1;
  auto check = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.device().is_cpu() && t.dim() > 0) {
      TORCH_CHECK(false, "fake device: ", name, " got a CPU tensor ", t.sizes(),
                  " among fake-device ones (something was created on or moved to the CPU)");
    }
    if (t.device().type() != kFake) return;
    if (index < 0) index = t.device().index();
    TORCH_CHECK(t.device().index() == index, "fake device: ", name, " got tensors on fake:", index,
                " and fake:", static_cast<int>(t.device().index()),
                " (a kernel runs on one device; move one of them)");
    check_use(t, name);
  };
  size_t first = stack->size() - args.size();
  for (size_t i = first; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (v.isTensor()) check(v.toTensor());
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) check(t);
    }
    if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        std::optional<at::Tensor> t = list.get(j);
        if (t) check(*t);
      }
    }
  }
  for (size_t i = first; i < stack->size(); ++i) {
    c10::IValue& v = (*stack)[i];
    if (!is_generator_type(args[i - first].type())) continue;
    at::Generator gen =
        v.isNone() ? default_fake_generator(static_cast<c10::DeviceIndex>(index < 0 ? -1 : index))
                   : v.toGenerator();
    TORCH_CHECK(gen.device().type() == kFake, "fake device: ", name, " got a ", gen.device(),
                " generator for fake-device tensors (CUDA kernels refuse a generator of another "
                "device: draw with one made for the tensors' device)");
    v = c10::IValue(static_cast<FakeGenerator*>(gen.unsafeGetGeneratorImpl())->cpu);
  }
  if (name == "aten::native_dropout") {
    run_with_device_generator(op, stack, index);
  } else {
    at::native::cpu_fallback(op, stack);
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", fake_empty);
  m.impl("empty_strided", fake_empty_strided);
  m.impl("_copy_from", fake_copy_from);
  m.impl("_copy_from_and_resize", fake_copy_from_and_resize);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("resize_", at::native::resize_);
  // Convolutions reach a backend through convolution_overrideable, which the CPU does not have:
  // the whole op (and its backward) falls back instead.
  m.impl("convolution", torch::CppFunction::makeFromBoxedFunction<&strict_fallback>());
  m.impl("convolution_backward", torch::CppFunction::makeFromBoxedFunction<&strict_fallback>());
  m.impl("_local_scalar_dense", fake_local_scalar_dense);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&strict_fallback>());
}

std::atomic<bool> fake_enabled{false};

}  // namespace

// Named, PrivateUse1 is also what libtorch takes for "the accelerator" (the autograd engine asks
// it for streams); unnamed, the engine would ask CUDA, which is compiled in but has no driver.
at::Device enable_fake_device() {
  static FakeHooks hooks;
  static bool registered = [] {
    c10::register_privateuse1_backend("fake");
    at::RegisterPrivateUse1HooksInterface(&hooks);
    if (const char* lr = std::getenv("LOCAL_RANK"); lr && *lr) {
      expected_index = std::atoi(lr) % kDevices;
    }
    return true;
  }();
  (void)registered;
  fake_enabled = true;
  return at::Device(kFake, 0);
}

bool fake_device_enabled() { return fake_enabled; }

void fake_device_expect(int index) {
  if (index >= 0) check_index(index);
  expected_index = index;
}

void fake_device_reset_for_test() {
  device_set = false;
  current_index = 0;
}

}  // namespace bv
