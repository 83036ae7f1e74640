// Batches on their way to the device, while the step before them computes (big_vision prefetches
// its batches to the devices). A DeviceCopy allocates the batch's tensors on the device for the
// current stream and fills them on a side stream, from pinned host memory where the batch is
// pinned (the input pipeline stacks it there for a device: PipelineOptions::pin_memory), so that
// neither the host nor the step waits for the copy. wait() makes the current stream wait for the
// copy (an event: the host does not wait), after which the tensors are like any others.
//
// Why the destination is allocated before switching streams: the caching allocator then ties
// its memory to the current stream, which is the one that uses and frees it, so it needs no
// record_stream. The host tensors are kept until wait(): a pinned block must outlive its copy.
//
// On the CPU nothing is copied and wait() returns the tensors given.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <vector>

namespace bv {

class DeviceCopy {
 public:
  DeviceCopy(std::vector<at::Tensor> host, c10::Device device);
  ~DeviceCopy();
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;

  // The tensors on the device, in the order given; the current stream waits for their copy.
  // Once only: a second call fails.
  std::vector<at::Tensor> wait();

 private:
  struct Pending;
  std::unique_ptr<Pending> pending_;
};

}  // namespace bv
