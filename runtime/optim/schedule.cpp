#include "optim/schedule.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "optim/config_util.h"

namespace bv::optim {

using nlohmann::json;

namespace {

std::vector<std::string> make_schedule_keys() {
  std::vector<std::string> keys = {"decay_type", "scale_with_batchsize",
                                   "end",        "linear_end",
                                   "power",      "steps",
                                   "mults",      "timescale",
                                   "shift"};
  for (const char* prefix : {"warmup", "cooldown", "timescale", "shift"}) {
    for (const char* suffix : {"steps", "examples", "epochs", "percent"}) {
      keys.push_back(std::string(prefix) + "_" + suffix);
    }
  }
  return keys;
}

// x ** power as jnp does it: repeated multiplication for an integer power (lax.integer_pow),
// pow() otherwise.
float float_pow(float x, double power) {
  if (power == std::floor(power) && std::fabs(power) <= 64) {
    float r = 1;
    for (int i = 0; i < static_cast<int>(std::fabs(power)); ++i) r *= x;
    return power < 0 ? 1.0f / r : r;
  }
  return std::pow(x, static_cast<float>(power));
}

}  // namespace

const std::vector<std::string>& schedule_keys() {
  static const std::vector<std::string> keys = make_schedule_keys();
  return keys;
}

Schedule::Schedule(const json& kw, double base, const ScheduleContext& ctx, const std::string& what)
    : lr_(base), total_(ctx.total_steps) {
  BV_CHECK(kw.is_null() || kw.is_object(), what, " must be an object, got ", kw.dump());
  check_keys(kw, schedule_keys(), what);
  const json& opts = kw.is_null() ? json::object() : kw;
  int64_t data = ctx.data_size, batch = ctx.batch_size, total = ctx.total_steps;

  warmup_ = steps("warmup", opts, data, batch, total, 0);
  cooldown_ = steps("cooldown", opts, data, batch, total, 0);
  // big_vision asserts this early: a warmup that never ends is a config mistake (0- and 1-step
  // runs, used for evals and debugging, are allowed).
  BV_CHECK(total <= 1 || warmup_ < total, what, ": warmup_steps (", warmup_,
           ") must be less than total_steps (", total, ")");

  if (get_bool(opts, "scale_with_batchsize", false, what)) {
    BV_CHECK(batch > 0, what, ": scale_with_batchsize needs the batch size");
    lr_ = lr_ * static_cast<double>(batch) / 256.0;
  }

  std::string type = get_string(opts, "decay_type", "stair", what);
  if (type == "linear" || type == "polynomial") {
    decay_ = Decay::kLinear;
    power_ = get_number(opts, "power", 1, what);
    end_ = has_value(opts, "end") ? get_number(opts, "end", 0, what)
                                  : get_number(opts, "linear_end", 0, what);
  } else if (type == "cosine") {
    decay_ = Decay::kCosine;
  } else if (type == "rsqrt") {
    decay_ = Decay::kRsqrt;
    // timescale/shift are durations too; the bare keys are the older spelling (in steps).
    double t_default = get_number(opts, "timescale", 10000, what);
    double s_default = get_number(opts, "shift", 0, what);
    BV_CHECK(t_default == std::floor(t_default) && s_default == std::floor(s_default), what,
             ": timescale and shift must be whole numbers of steps");
    timescale_ = static_cast<double>(
        steps("timescale", opts, data, batch, total, static_cast<int64_t>(t_default)));
    shift_ = static_cast<double>(
        steps("shift", opts, data, batch, total, static_cast<int64_t>(s_default)));
  } else if (type == "stair") {
    decay_ = Decay::kStair;
    auto read_list = [&](const char* key) {
      std::vector<double> out;
      if (!has_value(opts, key)) return out;
      const json& v = opts.at(key);
      bool ok = v.is_array() || (v.is_object() && v.empty());
      for (const auto& x : v) ok = ok && x.is_number();
      BV_CHECK(ok, what, ".", key, " must be a list of numbers, got ", v.dump());
      for (const auto& x : v) out.push_back(x.get<double>());
      return out;
    };
    for (double s : read_list("steps")) stair_steps_.push_back(static_cast<int64_t>(s));
    stair_mults_ = read_list("mults");
    BV_CHECK(stair_mults_.size() >= stair_steps_.size(), what, ": stair needs one of 'mults' per",
             " entry of 'steps' (", stair_steps_.size(), " steps, ", stair_mults_.size(),
             " mults)");
  } else {
    fail(what, ": unknown decay_type '", type, "' (known: stair, linear, polynomial, cosine, ",
         "rsqrt)");
  }
}

float Schedule::operator()(int64_t step) const {
  // jnp arithmetic: Python numbers become float32 when they meet the (int32) step.
  const float fstep = static_cast<float>(step);
  float progress = static_cast<float>(step - warmup_) / static_cast<float>(total_ - warmup_);
  progress = std::min(std::max(progress, 0.0f), 1.0f);  // NaN (total == warmup) stays NaN
  float lr = 0;
  switch (decay_) {
    case Decay::kLinear:
      lr = static_cast<float>(end_) +
           static_cast<float>(lr_ - end_) * float_pow(1.0f - progress, power_);
      break;
    case Decay::kCosine:
      lr = static_cast<float>(lr_ * 0.5) * (1.0f + std::cos(static_cast<float>(M_PI) * progress));
      break;
    case Decay::kRsqrt:
      if (warmup_ <= step) {
        float x = static_cast<float>(step + static_cast<int64_t>(shift_) - warmup_) /
                  static_cast<float>(timescale_);
        lr = static_cast<float>(lr_) / std::sqrt(1.0f + x);
      } else {
        lr = static_cast<float>(lr_) / std::sqrt(static_cast<float>(1 + shift_ / timescale_));
      }
      break;
    case Decay::kStair: {
      // searchsorted(steps, step + 1), side left: how many boundaries lie below step + 1.
      size_t i = 0;
      while (i < stair_steps_.size() && stair_steps_[i] < step + 1) ++i;
      float mult = i == 0 ? 1.0f : static_cast<float>(stair_mults_[i - 1]);
      lr = static_cast<float>(lr_) * mult;
      break;
    }
  }
  if (warmup_ > 0) lr = lr * std::min(1.0f, fstep / static_cast<float>(warmup_));
  if (cooldown_ > 0) {
    lr = lr * std::min(1.0f, static_cast<float>(total_ - step) / static_cast<float>(cooldown_));
  }
  return lr;
}

}  // namespace bv::optim
