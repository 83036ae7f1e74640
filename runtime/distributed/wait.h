// How bvlua waits for a c10d collective. Every wait goes through here, because the two backends
// want opposite things: Gloo runs on its own threads and its Work::wait(timeout) is the only
// bound on a lost peer, while on ProcessGroupNCCL a wait with a timeout turns the stream-level
// wait (the current CUDA stream waits for NCCL's; the host goes on queueing kernels) into a
// host busy-wait until the collective has finished, so that nothing overlaps. NCCL's own
// timeout (the group's Options::timeout) and watchdog bound its collectives instead.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>

namespace bv {

// Whether `comm`'s collectives are waited for on the device's stream (NCCL) rather than on the
// host (Gloo).
inline bool waits_on_stream(const ::c10d::Backend& comm) { return comm.getBackendName() == "nccl"; }

// Waits for `work`: on the stream (no timeout given, so the host does not block) when
// `on_stream`, else on the host for at most `timeout`.
inline void wait_for_work(::c10d::Work& work, bool on_stream, std::chrono::milliseconds timeout) {
  if (on_stream) {
    work.wait();
  } else {
    work.wait(timeout);
  }
}

}  // namespace bv
