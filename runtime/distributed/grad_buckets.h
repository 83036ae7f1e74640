// The replicated parameters' gradients averaged over processes while the backward runs, so that
// the all-reduce of the first gradients overlaps the computing of the rest (replicate's and
// zero1's gradients; fsdp's go to their owners through fsdp.h's own hooks).
//
// The gradients travel in buckets (flat buffers of up to `bucket_bytes`), filled in the order the
// backward produces them. A gradient hook on each parameter copies its gradient into its bucket
// (adding what earlier micro-batches accumulated, so hooks fire only in the last micro-batch's
// backward), and a bucket's all-reduce starts as soon as all its members are in and every bucket
// before it has started. after_backward waits for them all (on NCCL the stream waits, not the
// host), and the step's gradients become views into the buckets, averaged over ranks. The loss
// goes in its own small all-reduce, started before the backward.
//
// Every rank must cut the same buckets: the layout comes from the order in which the first
// step's gradients arrived on rank 0 (broadcast to the others). That first step all-reduces its
// buckets after its backward, as the path without overlap does.
//
// wire_bfloat16 (config.sharding_wire_dtype = "bfloat16"): a float32 bucket travels as bfloat16,
// half the bytes. Its all-reduce starts on a bfloat16 copy of the bucket (each rank's float32
// gradient, its micro-batches already summed in float32, rounded to nearest even), the backend
// sums the ranks' copies in bfloat16 (rounding each hop's sum), and after_backward converts the
// sum back into the float32 bucket (exactly) and divides it there by the number of processes.
// The loss and buckets of other dtypes travel as they are.
//
// Hooks run on autograd's threads (a CUDA device's): nothing here calls into Lua.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/step.h"

namespace bv {

struct DistGroup;

struct GradBucketStats {
  int64_t steps = 0;                // steps whose gradients went through here
  int64_t buckets = 0;              // bucket all-reduces started, in all
  int64_t started_in_backward = 0;  // of those, started by a hook before the backward ended
  int64_t layout_buckets = 0;       // buckets per step, once the layout is known (else 0)
};

class GradBuckets : public train::BackwardObserver {
 public:
  // names: the parameters whose gradients go through here (the others are left as they are).
  GradBuckets(std::shared_ptr<DistGroup> group, std::vector<std::string> names,
              int64_t bucket_bytes, bool wire_bfloat16 = false);
  ~GradBuckets() override;
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  void before_last_backward(const models::Params& params, const at::Tensor& loss) override;
  void after_backward(train::Gradients& out) override;
  void abandon() noexcept override;

  GradBucketStats stats() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace bv
