// big_vision's utils.create_learning_rate_schedule: a step -> multiplier function with warmup,
// a decay (stair by default, linear/polynomial, cosine, rsqrt) and cooldown. Evaluated in float32
// in the order big_vision's jnp code rounds, so values match it to the last bit or two.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace bv::optim {

class Schedule {
 public:
  // `kw`: one schedule's options as big_vision's **kw: decay_type, scale_with_batchsize,
  // {warmup,cooldown}_{steps,examples,epochs,percent}, end/linear_end, power, steps, mults,
  // timescale[_...], shift[_...]. `base` is the peak value (make passes the entry's `mult`).
  // `what` names the schedule in errors ("schedule[2]"). Unknown keys are errors.
  Schedule(const nlohmann::json& kw, double base, const ScheduleContext& ctx,
           const std::string& what = "schedule");

  // The multiplier for optimizer count `step` (0 for the very first update).
  float operator()(int64_t step) const;

  int64_t warmup_steps() const { return warmup_; }
  int64_t cooldown_steps() const { return cooldown_; }

 private:
  enum class Decay { kStair, kLinear, kCosine, kRsqrt };
  Decay decay_ = Decay::kStair;
  double lr_ = 1;  // base, times batch_size/256 when scale_with_batchsize
  int64_t total_ = 0, warmup_ = 0, cooldown_ = 0;
  double end_ = 0, power_ = 1;            // linear / polynomial
  double timescale_ = 10000, shift_ = 0;  // rsqrt
  std::vector<int64_t> stair_steps_;      // stair
  std::vector<double> stair_mults_;
};

// The keys a schedule object may hold (besides "mult", which make() takes out).
const std::vector<std::string>& schedule_keys();

}  // namespace bv::optim
