// The fake device: libtorch's PrivateUse1 backend with memory that is really host memory and
// every kernel falling back to the CPU's, as PyTorch's own open-registration tests do, for
// testing device placement on machines without a GPU (issue 16). What it adds over a plain CPU
// run is the check: an op that gets a CPU tensor next to fake-device ones fails, naming the op,
// where the CPU kernels would have quietly computed. So a training step whose parameters and
// batch are on the fake device proves that nothing in it is created on, or moved to, the CPU.
// Its kernels are registered when the program loads, but no tensor can be put on it until
// enable_fake_device() names the backend: bv.device("fake") with BV_TEST_DEVICE=1 (so that
// `bvlua train --device fake` is never a user's accident), bv._fake_device() in Lua tests, or
// tests/cpp/fake_device_test.cpp.
//
// Why not the meta device: it has no data, so a step cannot compare its numbers with the CPU's,
// and our code reads values (the loss, the norms) that meta tensors do not have.
#pragma once

#include <c10/core/Device.h>

namespace bv {

// Registers the fake device (once; later calls only return it) and returns it: "fake:0".
c10::Device enable_fake_device();

}  // namespace bv
