// big_vision's utils.steps and utils.itstime: durations given in steps, examples, epochs or
// percent of training, turned into steps with Python's rounding.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quote.h"
#include "optim/optimizer.h"

namespace bv::optim {

namespace {

// Python's `max(1, round(x)) if x else 0`: round half to even (2.5 -> 2), but any non-zero
// duration lasts at least one step.
int64_t to_integer(double x) {
  if (x == 0) return 0;
  double r = std::floor(x);
  double frac = x - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
  return r < 1 ? 1 : static_cast<int64_t>(r);
}

}  // namespace

int64_t steps(const std::string& prefix, const nlohmann::json& config, int64_t data_size,
              int64_t batch_size, int64_t total_steps, int64_t fallback) {
  BV_CHECK(config.is_object() || config.is_null(), "steps('", prefix,
           "'): the config must be an object, got ", snippet(config.dump()));
  // A key counts when it is present, not null and >= 0 (negative values switch it off).
  std::vector<std::string> matches;
  for (const char* suffix : {"steps", "examples", "epochs", "percent"}) {
    std::string key = prefix + "_" + suffix;
    if (!config.is_object() || !config.contains(key) || config[key].is_null()) continue;
    BV_CHECK(config[key].is_number(), "'", key, "' must be a number, got ",
             snippet(config[key].dump()));
    if (config[key].get<double>() >= 0) matches.push_back(key);
  }
  if (matches.size() > 1) {
    std::string list;
    for (const auto& m : matches) list += (list.empty() ? "" : ", ") + m;
    fail("only one of ", list, " should be given");
  }
  auto given = [&](const char* suffix) {
    return !matches.empty() && matches[0] == prefix + "_" + suffix;
  };
  auto value = [&]() { return config[matches[0]].get<double>(); };

  if (given("steps")) {
    // Returned as is, 0 included; only a whole number of steps makes sense.
    double v = value();
    BV_CHECK(v == std::floor(v), "'", matches[0], "' must be a whole number, got ", v);
    return static_cast<int64_t>(v);
  }
  if (batch_size > 0 && given("examples")) return to_integer(value() / batch_size);
  if (batch_size > 0 && data_size > 0 && given("epochs")) {
    double steps_per_epoch = static_cast<double>(data_size) / batch_size;
    return to_integer(value() * steps_per_epoch);
  }
  if (total_steps > 0 && given("percent")) {
    double pct = value();
    BV_CHECK(pct >= 0 && pct <= 1, "percents lie in [0, 1], but ", prefix, "_percent is ", pct);
    return to_integer(pct * total_steps);
  }
  if (fallback != -1) return fallback;
  fail("cannot convert '", prefix, "' to steps: ",
       matches.empty() ? str("none of ", prefix, "_steps, ", prefix, "_examples, ", prefix,
                             "_epochs, ", prefix, "_percent is given")
                       : str("'", matches[0], "' needs what is missing of batch_size (", batch_size,
                             "), data_size (", data_size, "), total_steps (", total_steps, ")"));
}

bool itstime(int64_t step, int64_t every, int64_t total, bool last, bool first,
             double drop_close_to_last) {
  if (every == 0) return false;  // Python's `every and ...`: never
  // Skip a regular event a little before the end, where the last one follows anyway.
  bool close_to_last = drop_close_to_last != 0 &&
                       std::abs(static_cast<double>(step - total)) < drop_close_to_last * every;
  bool is_step = step % every == 0 && !close_to_last;
  bool is_last = step == total;
  bool is_first = step == 1;
  return is_step || (last && is_last) || (first && is_first);
}

}  // namespace bv::optim
