// The fake device (core/fake_device.h): PrivateUse1 with host memory, a guard and hooks that
// say there is one device with one stream, the kernels that make, copy and view tensors, and a
// fallback for every other op that refuses a CPU tensor among device ones and then runs the
// CPU's kernel.
#include "core/fake_device.h"

#include <ATen/ATen.h>
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

#include <cstring>
#include <mutex>
#include <set>

namespace bv {

namespace {

constexpr c10::DeviceType kFake = c10::DeviceType::PrivateUse1;

// Host memory that counts its bytes as a GPU's caching allocator does (in use and peak; nothing
// is cached, so reserved is in use), so that device-memory metrics have something to show.
struct FakeAllocator final : c10::DeviceAllocator {
  struct Block {
    void* data;
    size_t bytes;
  };
  static void free_block(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    instance().count(-static_cast<int64_t>(block->bytes));
    c10::free_cpu(block->data);
    delete block;
  }
  static FakeAllocator& instance();

  c10::DataPtr allocate(size_t n) override {
    void* p = c10::alloc_cpu(n);
    count(static_cast<int64_t>(n));
    return {p, new Block{p, n}, &free_block, c10::Device(kFake, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* s : {&stats_.allocated_bytes[0], &stats_.reserved_bytes[0]}) s->reset_accumulated();
  }
  void resetPeakStats(c10::DeviceIndex) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* s : {&stats_.allocated_bytes[0], &stats_.reserved_bytes[0]}) s->reset_peak();
  }

 private:
  void count(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto* s : {&stats_.allocated_bytes[0], &stats_.reserved_bytes[0]}) {
      if (bytes >= 0) s->increase(static_cast<size_t>(bytes));
      else s->decrease(static_cast<size_t>(-bytes));
    }
  }
  std::mutex mutex_;
  c10::CachingDeviceAllocator::DeviceStats stats_;
};

FakeAllocator fake_allocator;
FakeAllocator& FakeAllocator::instance() { return fake_allocator; }
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &fake_allocator);

// One device whose work is done when it returns (its kernels are the CPU's): one stream, and
// events that are always complete, so code that overlaps copies with compute through side
// streams and events (core/device_copy.h) runs here as on a GPU.
struct FakeGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kFake; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(kFake, 0); }
  c10::Device getDevice() const override { return c10::Device(kFake, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override { return s; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void synchronizeEvent(void*) const override {}
};

// Pinned host memory, as CUDA's host allocator hands out for asynchronous copies: here plain
// host memory whose pointers are remembered, so that Tensor::is_pinned() says which it is.
struct FakePinnedAllocator final : c10::Allocator {
  std::mutex mu;
  std::set<const void*> live;

  static void release(void* ptr);
  c10::DataPtr allocate(size_t n) override {
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

C10_REGISTER_GUARD_IMPL(PrivateUse1, FakeGuard);

// What libtorch asks a backend about itself (the autograd engine: is there a context to run on).
struct FakeHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  at::Device getDeviceFromPtr(void*) const override { return c10::Device(kFake, 0); }
  bool isPinnedPtr(const void* ptr) const override { return fake_pinned.pinned(ptr); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &fake_pinned; }
};

at::Tensor fake_empty(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                      std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>,
                      std::optional<c10::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &fake_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor fake_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                              std::optional<c10::ScalarType> dtype, std::optional<c10::Layout>,
                              std::optional<c10::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &fake_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// The same memory seen as a CPU tensor (fake memory is host memory).
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().type() != kFake) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor fake_copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  host_alias(dst).copy_(host_alias(self));
  return dst;
}

at::Tensor fake_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes());
  return fake_copy_from(self, dst, false);
}

// The CPU fallback, refusing a CPU tensor among the arguments (0-dim ones stand for scalars,
// which every device accepts).
void strict_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  auto check = [&](const at::Tensor& t) {
    if (t.defined() && t.device().is_cpu() && t.dim() > 0) {
      TORCH_CHECK(false, "fake device: ", op.schema().name(), " got a CPU tensor ", t.sizes(),
                  " among fake-device ones (something was created on or moved to the CPU)");
    }
  };
  size_t first = stack->size() - args.size();
  for (size_t i = first; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor()) check(v.toTensor());
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) check(t);
    }
  }
  at::native::cpu_fallback(op, stack);
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
  m.impl("_local_scalar_dense",
         [](const at::Tensor& t) { return at::native::_local_scalar_dense_cpu(host_alias(t)); });
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&strict_fallback>());
}

}  // namespace

// Named, PrivateUse1 is also what libtorch takes for "the accelerator" (the autograd engine asks
// it for streams); unnamed, the engine would ask CUDA, which is compiled in but has no driver.
at::Device enable_fake_device() {
  static FakeHooks hooks;
  static bool registered = (c10::register_privateuse1_backend("fake"),
                            at::RegisterPrivateUse1HooksInterface(&hooks), true);
  (void)registered;
  return at::Device(kFake, 0);
}

}  // namespace bv
