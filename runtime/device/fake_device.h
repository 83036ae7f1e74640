// The fake device: libtorch's PrivateUse1 backend whose kernels are the CPU's, as PyTorch's own
// open-registration tests do, for testing device code on machines without a GPU (issues 16 and
// 29). It is as strict as CUDA where CUDA is stricter than the CPU, so that what passes here
// does not fail on a GPU:
// - an op that gets a CPU tensor among fake-device ones fails, naming the op (a CPU tensor in a
//   training step means something was made on, or moved to, the host);
// - memory is not host memory: data_ptr() is an address the host cannot read (a host read
//   crashes, as with a CUDA pointer); only copies reach the data;
// - streams are asynchronous: copies on a side stream, and non_blocking ones from or to pinned
//   memory, run later on a worker thread, and using their result from another stream without an
//   event wait is an error (device/fake_streams.h);
// - random ops refuse a CPU generator (the device has its own: at::globalContext()
//   .defaultGenerator(device) and getNewGenerator, as CUDA's);
// - there are two devices, fake:0 and fake:1; a kernel refuses tensors on both, and a process
//   with LOCAL_RANK set may only allocate on fake:(LOCAL_RANK % 2), after setting its device
//   (pinned host memory too), as a CUDA process must not make a context on another GPU.
// bv.dist gives fake-device tensors a Gloo group of their own, as NCCL is for CUDA's
// (distributed/dist.cpp). Its kernels are registered when the program loads, but no tensor can
// be put on it until enable_fake_device() names the backend: bv.device("fake") with
// BV_TEST_DEVICE=1 (so that `bvlua train --device fake` is never a user's accident),
// bv._fake_device() in Lua tests, or tests/cpp/fake_device_test.cpp.
//
// Why not the meta device: it has no data, so a step cannot compare its numbers with the CPU's,
// and our code reads values (the loss, the norms) that meta tensors do not have.
#pragma once

#include <c10/core/Device.h>

namespace bv {

// Registers the fake device (once; later calls only return it) and returns it: "fake:0".
c10::Device enable_fake_device();

// Whether enable_fake_device() has been called in this process (bv.dist then gives the fake
// device's tensors a group of their own, as NCCL has: distributed/dist.cpp).
bool fake_device_enabled();

// For tests: the device this process may allocate on (-1: any), as LOCAL_RANK sets it at
// enable_fake_device(); and forgetting that the device was set (the current device is fake:0
// again).
void fake_device_expect(int index);
void fake_device_reset_for_test();

}  // namespace bv
