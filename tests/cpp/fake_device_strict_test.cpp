// The fake device is as strict as CUDA (runtime/device/fake_device.h): each rule below is
// shown to bite, on a use that a plain CPU run (and the fake device before) let through.
#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>

#include "device/device_copy.h"
#include "device/fake_device.h"
#include "device/fake_streams.h"
#include "device/machine.h"

namespace {

at::Device fake0() { return bv::enable_fake_device(); }
at::Device fake1() {
  bv::enable_fake_device();
  return at::Device("fake:1");
}

at::Tensor pinned(at::IntArrayRef shape) {
  fake0();
  return at::empty(shape, at::TensorOptions(at::kFloat).pinned_memory(true));
}

using Catch::Contains;

}  // namespace

TEST_CASE("fake device: its memory cannot be read by the host, only copied", "[device]") {
  at::Tensor t = at::arange(4, at::kFloat).to(fake0());
  // Not an address of this process: a host read crashes (here, in a child).
  CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) >= (uintptr_t(1) << 52));
  pid_t child = ::fork();
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // Catch's handler would report the crash as a failure
    std::signal(SIGBUS, SIG_DFL);
    volatile float x = *static_cast<float*>(t.data_ptr());
    (void)x;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK((WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS));
  // Through libtorch's copy, and item(), it reads as written.
  CHECK(t.cpu().equal(at::arange(4, at::kFloat)));
  CHECK(t[3].item<float>() == 3);
  CHECK((t * 2).narrow(0, 1, 2).cpu().equal(at::tensor({2.0f, 4.0f})));
}

TEST_CASE("fake device: a side stream's copy used without an event wait is an error", "[device]") {
  at::Device dev = fake0();
  c10::impl::VirtualGuardImpl impl(dev.type());
  at::Tensor host = pinned({256}).fill_(3);
  at::Tensor d = at::empty({256}, at::TensorOptions(at::kFloat).device(dev));
  c10::Stream side = impl.getStreamFromGlobalPool(dev, false);
  {
    c10::StreamGuard on_side(side);
    d.copy_(host, /*non_blocking=*/true);
  }
  // The default stream never waited for the side stream: CUDA would read whatever was there.
  CHECK_THROWS_WITH(d.sum(), Contains("was never made to wait") && Contains("stream"));
  CHECK_THROWS_WITH(d.cpu(), Contains("was never made to wait"));
  c10::Event copied(dev.type());
  copied.record(side);
  copied.block(impl.getStream(dev));
  CHECK(d.sum().item<float>() == 768);

  // device/device_copy.h does it right: its wait() orders the current stream after the copy.
  bv::DeviceCopy copy({pinned({8}).fill_(5)}, dev);
  at::Tensor got = copy.wait()[0];
  CHECK(got.device() == dev);
  CHECK(got.cpu().equal(at::full({8}, 5.0f)));
}

TEST_CASE("fake device: a non_blocking copy to pinned memory is there only after a wait",
          "[device]") {
  at::Device dev = fake0();
  c10::impl::VirtualGuardImpl impl(dev.type());
  bv::fake::set_delay(std::chrono::milliseconds(300));
  at::Tensor src = at::full({64}, 7.0f).to(dev);
  at::Tensor out = pinned({64}).zero_();
  out.copy_(src, /*non_blocking=*/true);
  // The host reads before the copy ran: the old values, as on a GPU.
  CHECK(out.data_ptr<float>()[0] == 0.0f);
  impl.synchronizeStream(impl.getStream(dev));
  CHECK(out.data_ptr<float>()[0] == 7.0f);

  // A pinned buffer reused before its copy to the device ran: the device gets the new values.
  at::Tensor staging = pinned({4}).fill_(1);
  at::Tensor d = at::empty({4}, at::TensorOptions(at::kFloat).device(dev));
  d.copy_(staging, /*non_blocking=*/true);
  staging.fill_(2);
  CHECK(d.cpu().equal(at::full({4}, 2.0f)));  // stream order: the read waits for the copy
  bv::fake::set_delay(std::chrono::milliseconds(2));
}

TEST_CASE("fake device: random ops refuse a CPU generator, the device has its own", "[device]") {
  at::Device dev = fake0();
  at::Tensor probs = at::softmax(at::randn({4, 10}), -1);
  at::Generator cpu_gen = at::make_generator<at::CPUGeneratorImpl>(7);
  CHECK_THROWS_WITH(at::multinomial(probs.to(dev), 1, false, cpu_gen),
                    Contains("generator") && Contains("cpu"));
  at::Generator g1 = at::globalContext().defaultGenerator(dev).clone();
  at::Generator g2 = at::globalContext().defaultGenerator(dev).clone();
  CHECK(g1.device() == dev);
  g1.set_current_seed(7);
  g2.set_current_seed(7);
  at::Tensor a = at::multinomial(probs.to(dev), 1, false, g1);
  at::Tensor b = at::multinomial(probs.to(dev), 1, false, g2);
  CHECK(a.device() == dev);
  CHECK(a.cpu().equal(b.cpu()));
  // Its stream is a CPU generator's: the same seed draws the same numbers as one.
  CHECK(a.cpu().equal(at::multinomial(probs, 1, false, cpu_gen)));
  // Without a generator, the device's default one (seeded and saved apart from the CPU's).
  at::Generator dflt = at::globalContext().defaultGenerator(dev);  // shares its state
  dflt.set_current_seed(3);
  at::Tensor r1 = at::rand({5}, at::TensorOptions().device(dev));
  dflt.set_current_seed(3);
  CHECK(at::rand({5}, at::TensorOptions().device(dev)).cpu().equal(r1.cpu()));
}

TEST_CASE("fake device: two devices, a process allocates only on its own, after setting it",
          "[device]") {
  at::Tensor a = at::ones({2}, at::TensorOptions().device(fake0()));
  at::Tensor b = at::ones({2}, at::TensorOptions().device(fake1()));
  CHECK(b.device().index() == 1);
  CHECK((b * 3).device() == fake1());
  CHECK_THROWS_WITH(a + b, Contains("fake:0") && Contains("fake:1"));
  CHECK((a + b.to(fake0())).cpu().equal(at::full({2}, 2.0f)));
  CHECK(bv::device_memory_stats("fake:1")[0].second >= 8);  // b's bytes in use there
  CHECK_THROWS_WITH(bv::device_memory_stats("fake:2"), Contains("fake:2 does not exist"));

  // As a process with LOCAL_RANK=1 sees it (bv.device("fake") is fake:1 there).
  bv::fake_device_reset_for_test();
  bv::fake_device_expect(1);
  CHECK_THROWS_WITH(at::ones({2}, at::TensorOptions().device(fake0())),
                    Contains("on fake:0") && Contains("fake:1"));
  CHECK_THROWS_WITH(at::empty({2}, at::TensorOptions().pinned_memory(true)),
                    Contains("before this process") && Contains("set its device"));
  CHECK_THROWS_WITH(at::ones({2}, at::TensorOptions().device(at::Device("fake"))),
                    Contains("did not set its device"));
  bv::set_current_device("fake:1");  // what `bvlua train` does with bv.device's answer
  CHECK(at::ones({2}, at::TensorOptions().device(at::Device("fake"))).device() == fake1());
  CHECK(at::empty({2}, at::TensorOptions().pinned_memory(true)).is_pinned());
  bv::fake_device_expect(-1);
  bv::fake_device_reset_for_test();
}
