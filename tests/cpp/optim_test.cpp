// bv::optim: big_vision's utils_test (StepConversionTest, CreateLearningRateScheduleTest),
// itstime, the optax_test cases, and each optimizer against steps computed by hand.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim/transforms.h"
#include "test_util.h"

using bv::test::contains;
using bv::test::error_of;
using nlohmann::json;
namespace optim = bv::optim;

namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;
using Tensors = std::map<std::string, at::Tensor>;

// unittest's assertAlmostEqual: equal to 7 decimal places.
bool almost_equal(double a, double b) { return std::fabs(a - b) < 5e-8; }

// Rounds to bfloat16 and back (nearest even), as a bf16 accumulator stores a float.
float bf(double x) { return static_cast<float>(c10::BFloat16(static_cast<float>(x))); }

// 0-dim float32 tensors, big_vision's optax_test parameters.
Tensors scalars(const std::map<std::string, float>& values) {
  Tensors out;
  for (const auto& [name, v] : values) out[name] = at::scalar_tensor(v, at::kFloat);
  return out;
}

Shapes shapes_of(const Tensors& ts) {
  Shapes out;
  for (const auto& [name, t] : ts) out.emplace_back(name, t.sizes().vec());
  return out;
}

Tensors clone(const Tensors& ts) {
  Tensors out;
  for (const auto& [name, t] : ts) out[name] = t.clone();
  return out;
}

Tensors ones_like(const Tensors& ts) {
  Tensors out;
  for (const auto& [name, t] : ts) out[name] = at::ones_like(t);
  return out;
}

float value(const at::Tensor& t) { return t.item<float>(); }

// A JSON list of [regex, value] pairs. (nlohmann reads {{"a", 1}, {"b", 2}} as an object.)
json pairs(std::initializer_list<std::pair<const char*, json>> items) {
  json out = json::array();
  for (const auto& [key, v] : items) out.push_back(json::array({key, v}));
  return out;
}

// 1 - decay^k in float32, as optax computes Adam's bias correction (0.999 becomes 0.99900001f,
// which moves the second-moment correction by 1e-5 relative).
double correction(double decay, int k) {
  return 1.0f - std::pow(static_cast<float>(decay), static_cast<float>(k));
}

// The momentum as a bf16 accumulator multiplies it: jnp casts the Python float to bf16 first.
const float kMomentumBf16 = bf(0.9);  // 0.8984375

std::map<std::string, at::Tensor> state_map(const optim::Optimizer& opt) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : opt.state()) out[name] = t;
  return out;
}

optim::ScheduleContext steps_ctx(int64_t total) {
  optim::ScheduleContext ctx;
  ctx.total_steps = total;
  ctx.batch_size = 1;
  return ctx;
}

}  // namespace

// ---- utils.steps ---------------------------------------------------------------------------

TEST_CASE("steps: big_vision's StepConversionTest", "[optim]") {
  struct Case {
    const char* name;
    int64_t data_size, batch_size, total;  // 0 = None
    json cfg;
    int64_t expected;
  };
  std::vector<Case> cases = {
      {"nice_steps", 1000, 0, 0, {{"foo_steps", 3}}, 3},
      {"nice_epochs", 1000, 100, 0, {{"foo_epochs", 3}}, 30},
      {"nice_examples", 0, 100, 0, {{"foo_examples", 300}}, 3},
      {"nice_percent", 0, 0, 10, {{"foo_percent", 0.30}}, 3},
      {"negatives_ignored",
       1000,
       100,
       10,
       {{"foo_steps", -1}, {"foo_epochs", -1}, {"foo_examples", -1}, {"foo_percent", 0.3}},
       3},
      {"zero_percent", 0, 0, 10, {{"foo_percent", 0.0}}, 0},
      {"offbyone_steps", 1001, 0, 0, {{"foo_steps", 3}}, 3},
      {"offbyone_epochs", 1001, 100, 0, {{"foo_epochs", 3}}, 30},
      {"offbyone_examples", 0, 101, 0, {{"foo_examples", 300}}, 3},
      {"offbyone_percent", 0, 0, 11, {{"foo_percent", 0.30}}, 3},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    CHECK(optim::steps("foo", c.cfg, c.data_size, c.batch_size, c.total) == c.expected);
    // An entry that does not exist: an error naming it, or the fallback.
    std::string err =
        error_of([&] { optim::steps("bar", c.cfg, c.data_size, c.batch_size, c.total); });
    CHECK(contains(err, "'bar'"));
    CHECK(optim::steps("bar", c.cfg, c.data_size, c.batch_size, c.total, 1234) == 1234);
  }
}

TEST_CASE("steps: banker's rounding, at least one step, one key only", "[optim]") {
  // examples / batch: 250/100 = 2.5 -> 2 (half to even), 350/100 = 3.5 -> 4, 40/100 -> 1 (never
  // rounds a non-zero duration to 0), 0 -> 0; _steps come back unrounded.
  CHECK(optim::steps("w", {{"w_examples", 250}}, 0, 100, 0) == 2);
  CHECK(optim::steps("w", {{"w_examples", 350}}, 0, 100, 0) == 4);
  CHECK(optim::steps("w", {{"w_examples", 40}}, 0, 100, 0) == 1);
  CHECK(optim::steps("w", {{"w_examples", 0}}, 0, 100, 0) == 0);
  CHECK(optim::steps("w", {{"w_steps", 0}}, 0, 0, 0) == 0);
  CHECK(optim::steps("w", {{"w_epochs", 0.5}}, 1000, 100, 0) == 5);
  // A null value is not given at all.
  CHECK(optim::steps("w", {{"w_steps", nullptr}, {"w_examples", 300}}, 0, 100, 0) == 3);
  std::string err = error_of([] {
    optim::steps("w", {{"w_steps", 3}, {"w_epochs", 1}}, 1000, 100, 0);
  });
  CHECK(contains(err, "w_steps"));
  CHECK(contains(err, "w_epochs"));
  CHECK(contains(error_of([] { optim::steps("w", {{"w_percent", 1.5}}, 0, 0, 10); }), "w_percent"));
  // epochs without a data size cannot be converted: the error says what is missing.
  CHECK(contains(error_of([] { optim::steps("w", {{"w_epochs", 1}}, 0, 100, 0); }), "data_size"));
}

// ---- utils.itstime -------------------------------------------------------------------------

TEST_CASE("itstime: every, first, last and close to last", "[optim]") {
  CHECK_FALSE(optim::itstime(10, 0, 100));  // no interval: never
  CHECK_FALSE(optim::itstime(1, 0, 100));
  CHECK(optim::itstime(1, 10, 100));  // first step
  CHECK_FALSE(optim::itstime(1, 10, 100, true, false));
  CHECK(optim::itstime(10, 10, 100));
  CHECK(optim::itstime(90, 10, 100));
  CHECK_FALSE(optim::itstime(15, 10, 100));
  CHECK(optim::itstime(100, 10, 100));               // last
  CHECK_FALSE(optim::itstime(100, 10, 100, false));  // a multiple, but close to the last step
  // total 101: step 100 lies within 0.25 * 10 of the end, so only 101 fires.
  CHECK_FALSE(optim::itstime(100, 10, 101));
  CHECK(optim::itstime(101, 10, 101));
  CHECK_FALSE(optim::itstime(101, 10, 101, false));
  CHECK(optim::itstime(100, 10, 101, true, true, 0.0));  // dropping switched off
  CHECK(optim::itstime(90, 10, 101));
  // every 100, 4 steps before the end: dropped within 0.25 * 100, kept within 0.01 * 100.
  CHECK_FALSE(optim::itstime(200, 100, 204));
  CHECK(optim::itstime(200, 100, 204, true, true, 0.01));
}

// ---- utils.create_learning_rate_schedule ---------------------------------------------------

TEST_CASE("schedule: big_vision's CreateLearningRateScheduleTest", "[optim]") {
  // total 21, batch 512, base .5 scaled with the batch size (=> peak 1.0), warmup 5, cooldown 5.
  struct Case {
    const char* name;
    json extra;
    int64_t step;
    double expected;
  };
  std::vector<Case> cases = {
      {"linear", {{"decay_type", "linear"}}, 13, .5},
      {"polynomial", {{"decay_type", "polynomial"}, {"end", .1}, {"power", 2}}, 13, .325},
      {"cosine", {{"decay_type", "cosine"}}, 13, .5},
      {"rsqrt", {{"decay_type", "rsqrt"}, {"timescale", 1}}, 13, 0.3333333},
      {"stair_5", {{"decay_type", "stair"}, {"steps", {10}}, {"mults", {.5}}}, 5, 1.},
      {"stair_10", {{"decay_type", "stair"}, {"steps", {10}}, {"mults", {.5}}}, 10, .5},
      {"warmup_before", {{"decay_type", "rsqrt"}, {"timescale", 1}}, 3, .6},
      {"cooldown_after", {{"decay_type", "rsqrt"}, {"timescale", 1}}, 20, .05},
  };
  optim::ScheduleContext ctx;
  ctx.total_steps = 21;
  ctx.batch_size = 512;
  for (const auto& c : cases) {
    INFO(c.name);
    json kw = c.extra;
    kw["scale_with_batchsize"] = true;
    kw["warmup_steps"] = 5;
    kw["cooldown_steps"] = 5;
    optim::Schedule s(kw, 0.5, ctx);
    double lr = s(c.step);
    INFO("lr " << lr);
    CHECK(almost_equal(lr, c.expected));
  }
}

TEST_CASE("schedule: defaults, warmup from zero, cosine to zero, durations", "[optim]") {
  optim::ScheduleContext ctx = steps_ctx(100);
  // The default decay type is stair with no steps: constant.
  optim::Schedule constant(json::object(), 0.7, ctx);
  CHECK(constant(0) == 0.7f);
  CHECK(constant(99) == 0.7f);
  // Warmup multiplier min(1, step/warmup): exactly 0 for the first update.
  optim::Schedule warm({{"decay_type", "cosine"}, {"warmup_steps", 10}}, 1.0, ctx);
  CHECK(warm(0) == 0.0f);
  CHECK(warm(5) == 0.5f);
  CHECK(warm(10) == 1.0f);
  CHECK(warm(100) == 0.0f);  // cosine reaches exactly 0
  // linear_end and end (end wins); power 1.
  optim::Schedule lin({{"decay_type", "linear"}, {"linear_end", 0.1}}, 1.0, ctx);
  CHECK(almost_equal(lin(50), 0.55));
  CHECK(almost_equal(lin(100), 0.1));
  // Warmup given as a percent (10% of 100) and as epochs (data 1000, batch 100 -> 10/epoch).
  optim::Schedule pct({{"warmup_percent", 0.1}}, 1.0, ctx);
  CHECK(pct.warmup_steps() == 10);
  optim::ScheduleContext ctx2 = ctx;
  ctx2.batch_size = 100;
  ctx2.data_size = 1000;
  optim::Schedule ep({{"warmup_epochs", 2}, {"cooldown_examples", 250}}, 1.0, ctx2);
  CHECK(ep.warmup_steps() == 20);
  CHECK(ep.cooldown_steps() == 2);  // 2.5 steps -> 2
  // rsqrt with shift and the default timescale 10000: 1/sqrt(1 + (step+shift)/t).
  optim::Schedule rs({{"decay_type", "rsqrt"}, {"shift", 10000}}, 1.0, ctx);
  CHECK(almost_equal(rs(0), 1 / std::sqrt(2.0)));
  // Stair with two boundaries: the mult of boundary s applies from count s on
  // (searchsorted(steps, count + 1), side left).
  optim::Schedule stair({{"steps", {10, 20}}, {"mults", {0.1, 0.01}}}, 1.0, ctx);
  CHECK(stair(9) == 1.0f);
  CHECK(stair(10) == 0.1f);
  CHECK(stair(19) == 0.1f);
  CHECK(stair(20) == 0.01f);
}

TEST_CASE("schedule: bad configs name the culprit", "[optim]") {
  optim::ScheduleContext ctx = steps_ctx(10);
  CHECK(contains(error_of([&] {
                   optim::Schedule({{"decay_type", "cosinus"}}, 1, ctx);
                 }),
                 "cosinus"));
  CHECK(contains(error_of([&] {
                   optim::Schedule({{"decay_type", "linear"}, {"lienar_end", 1}}, 1, ctx);
                 }),
                 "lienar_end"));
  CHECK(contains(error_of([&] {
                   optim::Schedule({{"warmup_steps", 10}}, 1, ctx);
                 }),
                 "warmup_steps"));
  // 0- and 1-step runs may have any warmup.
  CHECK_NOTHROW(optim::Schedule({{"warmup_steps", 10}}, 1, steps_ctx(1)));
}

// ---- optax_test ----------------------------------------------------------------------------

TEST_CASE("optax: get_count is 0 after init and 1 after one update", "[optim]") {
  Tensors params = scalars({{"a", 1.f}});
  optim::Optimizer opt({{"lr", 1.0}, {"optax_name", "big_vision.sgd"}}, shapes_of(params),
                       steps_ctx(10));
  CHECK(opt.count() == 0);
  CHECK(value(state_map(opt).at("count")) == 0);
  opt.update(params, params);
  CHECK(opt.count() == 1);
  CHECK(value(state_map(opt).at("count")) == 1);
}

TEST_CASE("optax: split_frozen and replace_frozen", "[optim]") {
  Shapes shapes = {{"Dense_0/kernel", {}}, {"Dense_0/bias", {}}};
  json base = {{"lr", 0.1}, {"optax_name", "big_vision.sgd"}};
  json cosine = {{"decay_type", "cosine"}}, linear = {{"decay_type", "linear"}};

  json c1 = base;
  c1["schedule"] = pairs({{".*/kernel", cosine}, {".*/bias", linear}});
  optim::Optimizer o1(c1, shapes, steps_ctx(10));
  CHECK_FALSE(o1.frozen("Dense_0/kernel"));
  CHECK_FALSE(o1.frozen("Dense_0/bias"));
  CHECK(o1.num_schedules() == 2);
  CHECK(o1.schedule(1, 5) == 0.5);  // the bias's linear schedule at 5 of 10

  json c2 = base;
  c2["schedule"] = pairs({{".*/bias", nullptr}, {"Dense_0/.*", cosine}, {".*", nullptr}});
  optim::Optimizer o2(c2, shapes, steps_ctx(10));
  CHECK_FALSE(o2.frozen("Dense_0/kernel"));
  CHECK(o2.frozen("Dense_0/bias"));
  CHECK(o2.num_schedules() == 1);

  // replace_frozen [(".*/kernel", {}), (".*", None)]: the bias is frozen; `false` freezes too.
  json c3 = base;
  c3["schedule"] = pairs({{".*/kernel", json::object()}, {".*", false}});
  optim::Optimizer o3(c3, shapes, steps_ctx(10));
  CHECK_FALSE(o3.frozen("Dense_0/kernel"));
  CHECK(o3.frozen("Dense_0/bias"));

  json c4 = base;
  c4["schedule"] = pairs({{".*/kernel", nullptr}});
  std::string err = error_of([&] { optim::Optimizer(c4, shapes, steps_ctx(10)); });
  CHECK(contains(err, "All params must be covered"));
  CHECK(contains(err, "Dense_0/bias"));
}

namespace {

// The config of optax_test's make tests: lr .01, linear schedule, optax.scale(0.5), 10 steps.
json make_config() {
  return {{"lr", 0.01},
          {"schedule", {{"decay_type", "linear"}}},
          {"optax_name", "scale"},
          {"optax", {{"step_size", 0.5}}}};
}

// Runs 10 updates with gradients `grads` and checks each parameter's change against
// expected(name, p_before, g, step) and the schedule against (10 - step) / 10 (times `mult`).
template <typename Expected>
void check_ten_steps(optim::Optimizer& opt, Tensors& params, const Tensors& grads,
                     Expected expected) {
  for (int step = 0; step < 10; ++step) {
    INFO("step " << step);
    Tensors before = clone(params);
    optim::UpdateMetrics m = opt.update(params, grads);
    CHECK(opt.count() == step + 1);
    for (const auto& [name, p] : params) {
      INFO(name);
      double want = expected(name, value(before.at(name)), value(grads.at(name)), step);
      double got = value(p) - value(before.at(name));
      // (p + Δ rounds to the float32 grid of p: up to 2.4e-7 at p = 3)
      CHECK(got == Approx(want).margin(3e-7));
    }
    (void)m;
  }
}

}  // namespace

TEST_CASE("optax: make simple", "[optim]") {
  Tensors params = scalars({{"Dense_0/kernel", 1.f}, {"Dense_0/bias", 2.f}});
  optim::Optimizer opt(make_config(), shapes_of(params), steps_ctx(10));
  Tensors grads = ones_like(params);
  for (int step = 0; step < 10; ++step) {
    CHECK(almost_equal(opt.schedule(0, step), (10.0 - step) / 10));
  }
  // update = -sched * lr * g_scale * g
  check_ten_steps(opt, params, grads, [](const std::string&, double, double g, int step) {
    return -(10.0 - step) / 10 * 0.01 * 0.5 * g;
  });
}

TEST_CASE("optax: make wd", "[optim]") {
  Tensors params =
      scalars({{"Dense_0/kernel", 1.f}, {"Dense_0/bias", 2.f}, {"Dense_0/other", 3.f}});
  json config = make_config();
  config["wd"] = 1e-3;
  config["wd_mults"] = pairs({{".*/kernel", 2.0}, {".*/bias", 0.5}});
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  std::map<std::string, double> wds = {
      {"Dense_0/kernel", 2e-3}, {"Dense_0/bias", 5e-4}, {"Dense_0/other", 0}};
  // update = -sched * (lr * g_scale * g + p * wd)
  check_ten_steps(opt, params, ones_like(params),
                  [&](const std::string& name, double p, double g, int step) {
                    return -(10.0 - step) / 10 * (0.01 * 0.5 * g + p * wds.at(name));
                  });
}

TEST_CASE("optax: default wd_mults decay only .*/kernel$", "[optim]") {
  Tensors params = scalars({{"a/kernel", 1.f}, {"a/kernel_x", 1.f}, {"kernel", 1.f}});
  json config = {{"lr", 0.0}, {"wd", 0.5}, {"optax_name", "big_vision.sgd"}};
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  opt.update(params, ones_like(params));
  CHECK(value(params.at("a/kernel")) == 0.5f);  // 1 - 0.5 * 1
  CHECK(value(params.at("a/kernel_x")) == 1.f);
  CHECK(value(params.at("kernel")) == 1.f);  // no '/': not matched
}

TEST_CASE("optax: make clip_norm", "[optim]") {
  Tensors params =
      scalars({{"Dense_0/kernel", 1.f}, {"Dense_0/bias", 2.f}, {"Dense_0/other", 3.f}});
  json config = make_config();
  config["grad_clip_norm"] = 1.0;
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  // ||g|| = sqrt(3) over the three leaves: every gradient is scaled by 1/sqrt(3).
  double factor = 1 / std::sqrt(3.0);
  check_ten_steps(opt, params, ones_like(params),
                  [&](const std::string&, double, double g, int step) {
                    return -(10.0 - step) / 10 * 0.01 * 0.5 * g * factor;
                  });
}

TEST_CASE("optax: make multi (lr_mults, wd_mults, two schedules, frozen Dense_3)", "[optim]") {
  Tensors params;
  float v = 1;
  for (const char* layer : {"Dense_0", "Dense_1", "Dense_2", "Dense_3"}) {
    for (const char* leaf : {"kernel", "bias", "other"}) {
      params[std::string(layer) + "/" + leaf] = at::scalar_tensor(v++, at::kFloat);
    }
  }
  json config = make_config();
  config["lr_mults"] = pairs({{"Dense_0/.*", 2.0}, {"Dense_1/.*", 0.5}});
  config["wd"] = 1e-3;
  config["wd_mults"] = pairs({{".*/kernel", 10.0}, {".*/bias", 0.1}});
  config["schedule"] =
      pairs({{"Dense_0/.*", {{"decay_type", "linear"}, {"mult", 1.0}, {"linear_end", 1.0}}},
             {"Dense_[12]/.*", {{"decay_type", "linear"}, {"mult", 0.1}}},
             {".*", nullptr}});
  config["grad_clip_norm"] = 1.0;
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  CHECK(opt.num_schedules() == 2);
  CHECK(opt.frozen("Dense_3/kernel"));
  CHECK_FALSE(opt.frozen("Dense_2/other"));

  // Frozen gradients do not count towards the norm: 9 ones -> ||g|| = 3.
  const double clip = 1.0 / 3;
  auto layer_of = [](const std::string& name) { return name.substr(0, 7); };
  auto leaf_of = [](const std::string& name) { return name.substr(8); };
  Tensors grads = ones_like(params);
  for (int step = 0; step < 10; ++step) {
    INFO("step " << step);
    double sched1 = opt.schedule(0, step), sched2 = opt.schedule(1, step);
    CHECK(almost_equal(sched1, 1.0));
    CHECK(almost_equal(sched2, 0.1 * (10.0 - step) / 10));
    Tensors before = clone(params);
    optim::UpdateMetrics m = opt.update(params, grads);
    REQUIRE(m.global_schedule.size() == 2);
    CHECK(m.global_schedule[0] == sched1);
    CHECK(m.global_schedule[1] == sched2);
    CHECK(m.l2_grads == Approx(3.0));
    double updates_sq = 0, params_sq = 0;
    for (const auto& [name, p] : params) {
      INFO(name);
      std::string layer = layer_of(name), leaf = leaf_of(name);
      double sched = layer == "Dense_0" ? sched1 : layer == "Dense_3" ? 0.0 : sched2;
      double lr_mult = layer == "Dense_0" ? 2.0 : layer == "Dense_1" ? 0.5 : 1.0;
      double wd = layer == "Dense_3" ? 0.0 : leaf == "kernel" ? 1e-2 : leaf == "bias" ? 1e-4 : 0;
      double p0 = value(before.at(name));
      // update = -sched_i(step) * (lr * lr_mult * g_scale * g_clipped + p * wd)
      double want = -sched * (0.01 * lr_mult * 0.5 * clip + p0 * wd);
      double got = value(p) - p0;
      CHECK(got == Approx(want).margin(1e-6));        // float32 grid of p up to 12: 1e-6
      if (layer == "Dense_3") CHECK(value(p) == p0);  // frozen: bit for bit
      updates_sq += got * got;
      params_sq += value(p) * value(p);
    }
    CHECK(m.l2_updates == Approx(std::sqrt(updates_sq)).epsilon(1e-4));
    CHECK(m.l2_params == Approx(std::sqrt(params_sq)).epsilon(1e-6));
  }
}

TEST_CASE("optax: frozen parameters keep no optimizer state", "[optim]") {
  Shapes shapes = {{"small", {1}}, {"large", {1000}}};
  json config = {{"lr", 0.01},
                 {"schedule", pairs({{"small", {{"decay_type", "cosine"}}}, {"large", nullptr}})},
                 {"optax_name", "scale_by_adam"}};
  optim::Optimizer opt(config, shapes, steps_ctx(1));
  int64_t nbytes = 0;
  std::vector<std::string> names;
  for (const auto& [name, t] : opt.state()) {
    nbytes += t.numel() * t.element_size();
    names.push_back(name);
  }
  CHECK(nbytes < 1000);
  CHECK(names == std::vector<std::string>{"count", "small/mu", "small/nu"});
}

TEST_CASE("optax: adafactor's factored state for a 1024x1024 kernel", "[optim]") {
  json config = {{"lr", 0.01},
                 {"schedule", {{"decay_type", "linear"}}},
                 {"optax_name", "big_vision.scale_by_adafactor"}};
  optim::Optimizer opt(config, {{"Dense_0/kernel", {1024, 1024}}}, steps_ctx(1));
  auto s = state_map(opt);
  // FactoredState: count, v_row, v_col and a placeholder v of one element.
  int64_t factored = s.at("count").numel() + s.at("Dense_0/kernel/v_row").numel() +
                     s.at("Dense_0/kernel/v_col").numel() + s.at("Dense_0/kernel/v").numel();
  CHECK(factored == 2 * 1024 + 2);
  // The momentum (default 0.9) is a separate, full-size bf16 EMA.
  CHECK(s.at("Dense_0/kernel/ema").numel() == 1024 * 1024);
  CHECK(s.at("Dense_0/kernel/ema").scalar_type() == at::kBFloat16);
  CHECK(s.at("Dense_0/kernel/v_row").scalar_type() == at::kFloat);
  CHECK(s.size() == 5);
}

// ---- the optimizers, step by step ----------------------------------------------------------

TEST_CASE("adafactor: which parameters are factored, and along which axes", "[optim]") {
  // {d1, d0} = (second-largest, largest) axes; factored only when the second-largest >= 32.
  CHECK(optim::factored_dims({40, 32}, 32) == std::make_pair(1, 0));
  CHECK(optim::factored_dims({32, 40}, 32) == std::make_pair(0, 1));
  CHECK(optim::factored_dims({32, 32}, 32) == std::make_pair(0, 1));  // stable: earlier is d1
  CHECK(optim::factored_dims({2, 40, 32}, 32) == std::make_pair(2, 1));
  CHECK(optim::factored_dims({2, 40}, 32) == std::make_pair(-1, -1));
  CHECK(optim::factored_dims({3}, 32) == std::make_pair(-1, -1));
  CHECK(optim::factored_dims({31, 4096}, 32) == std::make_pair(-1, -1));

  json config = {{"lr", 1.0}, {"optax_name", "big_vision.scale_by_adafactor"}};
  optim::Optimizer opt(config, {{"a", {2, 40, 32}}, {"b", {2, 40}}}, steps_ctx(10));
  auto s = state_map(opt);
  // v_row drops d0 (the largest axis), v_col drops d1.
  CHECK(s.at("a/v_row").sizes().vec() == std::vector<int64_t>{2, 32});
  CHECK(s.at("a/v_col").sizes().vec() == std::vector<int64_t>{2, 40});
  CHECK(s.at("a/v").sizes().vec() == std::vector<int64_t>{1});
  CHECK(s.at("b/v").sizes().vec() == std::vector<int64_t>{2, 40});
  CHECK(s.at("b/v_row").sizes().vec() == std::vector<int64_t>{1});
}

TEST_CASE("adafactor: factored [40, 32] kernel, two steps by hand", "[optim]") {
  // g = 1 everywhere except g[0][0] = 2; lr 1, constant schedule, default options
  // (momentum 0.9 in bf16, no debiasing). Axis 0 (40) is d0, axis 1 (32) is d1.
  // Step 1: beta2 = min(0.999, 1 - 1^-0.8) = 0, so the moments are the plain means of g²:
  //   v_row[j] = mean_i g² = (4 + 39)/40 = 1.075 for j = 0, else 1            (shape [32])
  //   v_col[i] = mean_j g² = (4 + 31)/32 = 1.09375 for i = 0, else 1         (shape [40])
  //   r = mean(v_row) = (1.075 + 31)/32 = 1.00234375
  //   u[i][j] = g[i][j] * (v_row[j]/r)^-1/2 * v_col[i]^-1/2
  //   ema = 0.9*0 + 0.1*u;  Δθ = -lr * ema = -0.1 u
  // Step 2 (same g): beta2 = 1 - 2^-0.8 = 0.4256508; the moments stay the same, so u does too:
  //   ema = 0.1*u + bf16(0.8984375 * bf16(0.1*u)) (the stored EMA is bf16, and so are 0.9
  //   (= 0.8984375 in bf16) and the product)
  json config = {{"lr", 1.0}, {"optax_name", "big_vision.scale_by_adafactor"}};
  at::Tensor g = at::ones({40, 32});
  g[0][0] = 2;
  Tensors params = {{"k", at::zeros({40, 32})}};
  Tensors grads = {{"k", g}};
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));

  const double r = (1.075 + 31) / 32;
  auto u = [&](int i, int j) {
    double gij = (i == 0 && j == 0) ? 2 : 1;
    double vr = j == 0 ? 1.075 : 1, vc = i == 0 ? 1.09375 : 1;
    return gij / std::sqrt(vr / r) / std::sqrt(vc);
  };
  CHECK(u(1, 1) == Approx(1.0011711891579782));  // sqrt(1.00234375)
  opt.update(params, grads);
  at::Tensor p1 = params.at("k").clone();
  for (auto [i, j] : std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {39, 31}}) {
    INFO(i << "," << j);
    CHECK(value(p1[i][j]) == Approx(-0.1 * u(i, j)).epsilon(1e-6));
  }
  auto s = state_map(opt);
  CHECK(value(s.at("k/v_row")[0]) == Approx(1.075).epsilon(1e-6));
  CHECK(value(s.at("k/v_row")[1]) == Approx(1.0).epsilon(1e-6));
  CHECK(value(s.at("k/v_col")[0]) == Approx(1.09375).epsilon(1e-6));
  CHECK(s.at("k/v_row").numel() == 32);
  CHECK(s.at("k/ema").scalar_type() == at::kBFloat16);
  CHECK(value(s.at("k/ema")[0][0]) == bf(0.1f * static_cast<float>(u(0, 0))));

  opt.update(params, grads);
  for (auto [i, j] : std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}) {
    INFO(i << "," << j);
    float ema1 = bf(0.1f * static_cast<float>(u(i, j)));
    double ema2 = 0.1 * u(i, j) + bf(kMomentumBf16 * ema1);
    CHECK(value(params.at("k")[i][j]) - value(p1[i][j]) == Approx(-ema2).epsilon(1e-5));
  }
}

TEST_CASE("adafactor: unfactored vector, beta2 schedule, no momentum, block clipping", "[optim]") {
  // momentum None: Δθ = -u. Step 1: beta2 = 0, v = g1² (+1e-30), u = g1/|g1| = sign(g1).
  // Step 2: beta2 = 1 - 2^-0.8; v = beta2 g1² + (1 - beta2) g2²; u = g2 / sqrt(v).
  json config = {{"lr", 1.0},
                 {"optax_name", "big_vision.scale_by_adafactor"},
                 {"optax", {{"momentum", nullptr}}}};
  Tensors params = {{"b", at::zeros({3})}};
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  CHECK(state_map(opt).count("b/ema") == 0);
  std::vector<double> g1 = {1, -2, 0.5}, g2 = {2, 1, -1};
  opt.update(params, {{"b", at::tensor(std::vector<float>(g1.begin(), g1.end()))}});
  at::Tensor p1 = params.at("b").clone();
  CHECK(value(p1[0]) == Approx(-1));
  CHECK(value(p1[1]) == Approx(1));
  CHECK(value(p1[2]) == Approx(-1));
  opt.update(params, {{"b", at::tensor(std::vector<float>(g2.begin(), g2.end()))}});
  const double beta2 = 1 - std::pow(2.0, -0.8);
  for (int i = 0; i < 3; ++i) {
    double v = beta2 * g1[i] * g1[i] + (1 - beta2) * g2[i] * g2[i];
    CHECK(value(params.at("b")[i]) - value(p1[i]) == Approx(-g2[i] / std::sqrt(v)).epsilon(1e-5));
    CHECK(value(state_map(opt).at("b/v")[i]) == Approx(v).epsilon(1e-5));
  }

  // clipping_threshold 0.5: u = sign(g) has rms 1, so it is divided by max(1, 1/0.5) = 2.
  json clipped = config;
  clipped["optax"]["clipping_threshold"] = 0.5;
  Tensors q = {{"b", at::zeros({3})}};
  optim::Optimizer opt2(clipped, shapes_of(q), steps_ctx(10));
  opt2.update(q, {{"b", at::tensor(std::vector<float>(g1.begin(), g1.end()))}});
  CHECK(value(q.at("b")[1]) == Approx(0.5));
  CHECK(value(q.at("b")[2]) == Approx(-0.5));
}

TEST_CASE("adam: two steps by hand, with float32 and bfloat16 mu", "[optim]") {
  // b1 .9, b2 .999, eps 1e-8, lr 1, constant schedule; g1 = [0.5, -2], g2 = [1, 1].
  //   mu_k = 0.9 mu + 0.1 g;  nu_k = 0.999 nu + 0.001 g²
  //   u = (mu_k / c1(k)) / (sqrt(nu_k / c2(k)) + 1e-8);  Δθ = -u
  //   with the bias corrections c(k) = 1 - decay^k in float32 (see correction()).
  // Step 1: mu = 0.1 g1, nu = 0.001 g1², so u ~ sign(g1).
  // Step 2: mu = [0.145, -0.08], nu = [0.00124975, 0.004996], c1 = 0.19, c2 = 0.001999,
  //   u ~ [0.96518, -0.26634].
  // With mu_dtype bfloat16 the stored mu is bf16, and 0.9 mu is bf16(bf16(0.9) * mu).
  std::vector<double> g1 = {0.5, -2}, g2 = {1, 1};
  for (bool bf16 : {false, true}) {
    INFO("bf16 mu: " << bf16);
    json config = {{"lr", 1.0}, {"optax_name", "scale_by_adam"}};
    if (bf16) config["optax"] = {{"mu_dtype", "bfloat16"}};
    Tensors params = {{"w", at::zeros({2})}};
    optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
    opt.update(params, {{"w", at::tensor(std::vector<float>(g1.begin(), g1.end()))}});
    at::Tensor p1 = params.at("w").clone();
    auto s = state_map(opt);
    CHECK(s.at("w/mu").scalar_type() == (bf16 ? at::kBFloat16 : at::kFloat));
    CHECK(s.at("w/nu").scalar_type() == at::kFloat);
    for (int i = 0; i < 2; ++i) {
      double mu1 = 0.1 * g1[i], nu1 = 0.001 * g1[i] * g1[i];
      double want = (mu1 / correction(0.9, 1)) / (std::sqrt(nu1 / correction(0.999, 1)) + 1e-8);
      CHECK(value(p1[i]) == Approx(-want).epsilon(1e-6));
      CHECK(value(s.at("w/mu")[i]) == Approx(bf16 ? bf(mu1) : mu1).epsilon(1e-6));
      CHECK(value(s.at("w/nu")[i]) == Approx(nu1).epsilon(1e-6));
    }
    opt.update(params, {{"w", at::tensor(std::vector<float>(g2.begin(), g2.end()))}});
    for (int i = 0; i < 2; ++i) {
      double mu1 = 0.1 * g1[i], nu1 = 0.001 * g1[i] * g1[i];
      double decayed_mu = bf16 ? bf(kMomentumBf16 * bf(mu1)) : 0.9 * mu1;
      double mu = decayed_mu + 0.1 * g2[i];
      double nu = 0.999 * nu1 + 0.001 * g2[i] * g2[i];
      double want = (mu / correction(0.9, 2)) / (std::sqrt(nu / correction(0.999, 2)) + 1e-8);
      CHECK(value(params.at("w")[i]) - value(p1[i]) == Approx(-want).epsilon(1e-5));
      CHECK(value(state_map(opt).at("w/mu")[i]) == Approx(bf16 ? bf(mu) : mu).epsilon(1e-6));
      if (!bf16) {
        double known = i == 0 ? 0.96518 : -0.26634;
        CHECK(value(params.at("w")[i]) - value(p1[i]) == Approx(-known).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("momentum_hp: trace in bfloat16, plain and nesterov", "[optim]") {
  // t = g + 0.9 t, stored in bf16; the update is the float32 t (nesterov: g + 0.9 t).
  // g1 = [0.3, -1.7], g2 = [1.1, 0.2]; lr 1, constant schedule. With the bf16 trace, 0.9 t is
  // bf16(b * t) where b = bf16(0.9) = 0.8984375 (jnp's weak-typed Python float).
  //   plain:    Δ1 = -g1;             Δ2 = -(g2 + bf16(b bf16(g1)))
  //   nesterov: Δ1 = -(g1 + 0.9 g1);  Δ2 = -(g2 + 0.9 t2) with t2 = g2 + bf16(b bf16(g1))
  //             (the nesterov product uses the float32 t2, before it is stored)
  std::vector<double> g1 = {0.3, -1.7}, g2 = {1.1, 0.2};
  for (bool nesterov : {false, true}) {
    INFO("nesterov: " << nesterov);
    json config = {
        {"lr", 1.0}, {"optax_name", "big_vision.momentum_hp"}, {"optax", {{"nesterov", nesterov}}}};
    Tensors params = {{"w", at::zeros({2})}};
    optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
    opt.update(params, {{"w", at::tensor(std::vector<float>(g1.begin(), g1.end()))}});
    at::Tensor p1 = params.at("w").clone();
    auto s = state_map(opt);
    CHECK(s.at("w/trace").scalar_type() == at::kBFloat16);
    for (int i = 0; i < 2; ++i) {
      CHECK(value(s.at("w/trace")[i]) == bf(static_cast<float>(g1[i])));
      double want = nesterov ? g1[i] + 0.9 * g1[i] : g1[i];
      CHECK(value(p1[i]) == Approx(-want).epsilon(1e-6));
    }
    opt.update(params, {{"w", at::tensor(std::vector<float>(g2.begin(), g2.end()))}});
    for (int i = 0; i < 2; ++i) {
      double t2 = g2[i] + bf(kMomentumBf16 * bf(g1[i]));
      double want = nesterov ? g2[i] + 0.9 * t2 : t2;
      CHECK(value(params.at("w")[i]) - value(p1[i]) == Approx(-want).epsilon(1e-6));
    }
  }
  // The bf16 rounding is visible at this precision: 0.3 is stored as 0.30078125.
  CHECK(bf(0.3) == 0.30078125f);
}

TEST_CASE("sgd: the gradient times lr and schedule, stateless", "[optim]") {
  json config = {
      {"lr", 0.1}, {"optax_name", "big_vision.sgd"}, {"schedule", {{"decay_type", "linear"}}}};
  Tensors params = {{"w", at::zeros({2})}};
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(4));
  CHECK(opt.state().size() == 1);  // only the count
  Tensors grads = {{"w", at::tensor(std::vector<float>{1, 2})}};
  opt.update(params, grads);  // sched(0) = 1
  CHECK(value(params.at("w")[1]) == Approx(-0.2));
  opt.update(params, grads);  // sched(1) = 0.75
  CHECK(value(params.at("w")[1]) == Approx(-0.2 - 0.15));
  json bad = config;
  bad["optax"] = {{"momentum", 0.9}};
  CHECK(contains(error_of([&] { optim::Optimizer(bad, shapes_of(params), steps_ctx(4)); }),
                 "'momentum'"));
}

// ---- make's guarantees ---------------------------------------------------------------------

TEST_CASE("warmup from zero: the first update is exactly zero, weight decay included", "[optim]") {
  json config = {{"lr", 0.1},
                 {"wd", 0.5},
                 {"optax_name", "scale_by_adam"},
                 {"schedule", {{"decay_type", "cosine"}, {"warmup_steps", 3}}}};
  Tensors params = {{"a/kernel", at::full({4}, 1.5)}, {"a/bias", at::full({4}, -0.25)}};
  Tensors before = clone(params);
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  optim::UpdateMetrics m = opt.update(params, ones_like(params));
  CHECK(m.global_schedule == std::vector<double>{0.0});
  CHECK(m.l2_updates == 0.0);
  CHECK(m.l2_grads == Approx(std::sqrt(8.0)));
  CHECK(at::equal(params.at("a/kernel"), before.at("a/kernel")));
  CHECK(at::equal(params.at("a/bias"), before.at("a/bias")));
  // The optimizer state did advance, and the second update (sched 1/3) moves the parameters.
  CHECK(opt.count() == 1);
  m = opt.update(params, ones_like(params));
  CHECK(m.global_schedule[0] == Approx(1.0 / 3));
  CHECK_FALSE(at::equal(params.at("a/kernel"), before.at("a/kernel")));
}

TEST_CASE("frozen parameters: unchanged bit for bit, no state, gradients ignored", "[optim]") {
  json config = {{"lr", 0.3},
                 {"wd", 0.1},
                 {"wd_mults", pairs({{".*", 1.0}})},
                 {"grad_clip_norm", 0.01},
                 {"optax_name", "scale_by_adam"},
                 {"schedule", pairs({{"enc/.*", nullptr}, {".*", json::object()}})}};
  at::Tensor enc = at::linspace(-1, 1, 12).reshape({3, 4});
  Tensors params = {{"enc/kernel", enc.clone()}, {"head/kernel", at::ones({4, 2})}};
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  for (const auto& [name, t] : opt.state()) CHECK_FALSE(contains(name, "enc/"));
  // A NaN gradient for the frozen parameter changes nothing: not the clip norm, not l2_grads.
  Tensors grads = {{"enc/kernel", at::full({3, 4}, NAN)}, {"head/kernel", at::full({4, 2}, 0.5)}};
  optim::UpdateMetrics m = opt.update(params, grads);
  CHECK(at::equal(params.at("enc/kernel"), enc));
  CHECK(m.l2_grads == Approx(std::sqrt(8 * 0.25)));
  CHECK(std::isfinite(m.l2_updates));
  // Frozen gradients may also be left out.
  opt.update(params, {{"head/kernel", at::full({4, 2}, 0.5)}});
  CHECK(at::equal(params.at("enc/kernel"), enc));
  CHECK(opt.frozen("enc/kernel"));
  CHECK(contains(error_of([&] { opt.frozen("nope"); }), "nope"));
}

TEST_CASE("parameters that require grad are updated in place", "[optim]") {
  Tensors params = {{"w", at::zeros({2}).set_requires_grad(true)}};
  at::Tensor alias = params.at("w");
  optim::Optimizer opt({{"lr", 1.0}, {"optax_name", "big_vision.sgd"}}, shapes_of(params),
                       steps_ctx(10));
  opt.update(params, {{"w", at::ones({2})}});
  CHECK(value(alias[0]) == -1.0f);  // the caller's tensor changed
  CHECK(alias.requires_grad());
}

TEST_CASE("state() and load_state() continue identically", "[optim]") {
  json config = {{"lr", 0.01},
                 {"wd", 1e-2},
                 {"optax_name", "big_vision.scale_by_adafactor"},
                 {"schedule", {{"decay_type", "cosine"}, {"warmup_steps", 2}}},
                 {"grad_clip_norm", 5.0}};
  Tensors params = {{"l/kernel", at::sin(at::arange(40 * 32, at::kFloat)).reshape({40, 32})},
                    {"l/bias", at::cos(at::arange(3, at::kFloat))}};
  auto grads_at = [&](int step) {
    Tensors g;
    for (const auto& [name, p] : params) {
      g[name] = at::cos(at::arange(p.numel(), at::kFloat) * (0.37 + step)).reshape(p.sizes());
    }
    return g;
  };
  optim::Optimizer a(config, shapes_of(params), steps_ctx(20));
  for (int step = 0; step < 3; ++step) a.update(params, grads_at(step));
  optim::NamedTensors saved = a.state();
  std::vector<at::Tensor> saved_copies;
  for (const auto& [name, t] : saved) saved_copies.push_back(t.clone());
  Tensors saved_params = clone(params);
  for (int step = 3; step < 5; ++step) a.update(params, grads_at(step));

  // The tensors state() handed out were not changed by later updates.
  for (size_t i = 0; i < saved.size(); ++i) CHECK(at::equal(saved[i].second, saved_copies[i]));

  optim::Optimizer b(config, shapes_of(params), steps_ctx(20));
  b.load_state(saved);
  CHECK(b.count() == 3);
  Tensors resumed = clone(saved_params);
  for (int step = 3; step < 5; ++step) b.update(resumed, grads_at(step));
  CHECK(b.count() == 5);
  for (const auto& [name, p] : params) CHECK(at::equal(resumed.at(name), p));
  auto sa = state_map(a), sb = state_map(b);
  for (const auto& [name, t] : sa) CHECK(at::equal(sb.at(name), t));

  // Mismatches are named.
  optim::NamedTensors missing(saved.begin(), saved.end() - 1);
  CHECK(contains(error_of([&] { b.load_state(missing); }), saved.back().first));
  optim::NamedTensors extra = saved;
  extra.emplace_back("l/other/v", at::zeros({1}));
  CHECK(contains(error_of([&] { b.load_state(extra); }), "l/other/v"));
  optim::NamedTensors reshaped = saved;
  for (auto& [name, t] : reshaped) {
    if (name == "l/kernel/v_col") t = at::zeros({41});
  }
  std::string err = error_of([&] { b.load_state(reshaped); });
  CHECK(contains(err, "l/kernel/v_col"));
  CHECK(contains(err, "[41]"));
  CHECK(b.count() == 5);  // a failed load changes nothing
}

// ---- the fused update against the reference ----------------------------------------------

namespace {

// Parameters of several kinds: a factored kernel kept transposed (BiT's layout: the state takes
// its strides), a layer stack, vectors, a scalar, a frozen one and one with a bf16 gradient.
Tensors mixed_params() {
  at::manual_seed(7);
  return {{"enc/kernel", at::randn({48, 40}).t()},
          {"enc/bias", at::randn({40})},
          {"stack/kernel", at::randn({3, 40, 36})},
          {"head/kernel", at::randn({40, 5})},
          {"head/bias", at::zeros({5})},
          {"norm/scale", at::ones({})},
          {"emb/kernel", at::randn({7, 32})},
          {"frozen/kernel", at::randn({4, 4})}};
}

// Gradients for step `step`: their global norm grows with the step, so that grad_clip_norm 3
// clips some steps and not others.
Tensors mixed_grads(const Tensors& params, int step) {
  at::manual_seed(100 + step);
  Tensors out;
  for (const auto& [name, p] : params) {
    out[name] = at::randn(p.sizes()) * (0.02 * (step + 1));
    if (name == "emb/kernel") out[name] = out[name].to(at::kBFloat16);
  }
  return out;
}

// Two schedules and a frozen parameter, over mixed_params.
json mixed_schedule() {
  return pairs({{"frozen/.*", nullptr},
                {".*/kernel", {{"decay_type", "cosine"}, {"warmup_steps", 1}}},
                {".*", {{"decay_type", "linear"}, {"mult", 0.5}}}});
}

// Runs `config` with the fused update and with the reference (config._reference_update) side by
// side for 5 steps, both with `lr_multiplier`, and checks that parameters, state and norms agree
// bit for bit.
void check_same_as_reference(json config, double lr_multiplier = 1) {
  config["schedule"] = mixed_schedule();
  json ref_config = config;
  ref_config["_reference_update"] = true;
  Tensors pa = mixed_params(), pb = clone(pa);
  optim::Optimizer a(config, shapes_of(pa), steps_ctx(6)),
      b(ref_config, shapes_of(pb), steps_ctx(6));
  if (lr_multiplier != 1) {
    a.set_lr_multiplier(lr_multiplier);
    b.set_lr_multiplier(lr_multiplier);
  }
  for (int step = 0; step < 5; ++step) {
    INFO("step " << step);
    Tensors g = mixed_grads(pa, step);
    optim::UpdateMetrics ma = a.update(pa, g, /*all_norms=*/step != 2);
    optim::UpdateMetrics mb = b.update(pb, g, step != 2);
    if (step != 2) {
      CHECK(ma.l2_grads == mb.l2_grads);
      CHECK(ma.l2_updates == mb.l2_updates);
      CHECK(ma.l2_params == mb.l2_params);
    }
    for (const auto& [name, p] : pa) {
      INFO(name);
      CHECK(at::equal(p, pb.at(name)));
    }
    auto sa = state_map(a), sb = state_map(b);
    REQUIRE(sa.size() == sb.size());
    for (const auto& [name, t] : sa) {
      INFO(name);
      CHECK(t.scalar_type() == sb.at(name).scalar_type());
      CHECK(at::equal(t, sb.at(name)));
    }
  }
  CHECK_FALSE(at::equal(pa.at("enc/kernel"), mixed_params().at("enc/kernel")));
  CHECK(at::equal(pa.at("frozen/kernel"), mixed_params().at("frozen/kernel")));
}

}  // namespace

TEST_CASE("fused update: adam equals the reference bit for bit", "[optim]") {
  json base = {{"lr", 0.01}, {"wd", 1e-2}, {"optax_name", "scale_by_adam"}};
  SECTION("defaults") { check_same_as_reference(base); }
  SECTION("clipping, lr_mults, wd_mults") {
    json c = base;
    c["grad_clip_norm"] = 3.0;
    c["lr_mults"] = pairs({{"head/.*", 0.1}});
    c["wd_mults"] = pairs({{".*/kernel", 1.0}, {"norm/.*", 0.5}});
    check_same_as_reference(c);
  }
  SECTION("bfloat16 mu, nesterov, eps_root") {
    json c = base;
    c["optax"] = {{"mu_dtype", "bfloat16"}, {"nesterov", true}, {"eps_root", 1e-9}};
    check_same_as_reference(c);
  }
  SECTION("lr multiplier 0.3, clipping") {
    json c = base;
    c["grad_clip_norm"] = 3.0;
    check_same_as_reference(c, 0.3);
  }
}

TEST_CASE("fused update: adafactor equals the reference bit for bit", "[optim]") {
  json base = {{"lr", 0.01}, {"wd", 1e-3}, {"optax_name", "big_vision.scale_by_adafactor"}};
  SECTION("defaults (bf16 momentum), clipping") {
    json c = base;
    c["grad_clip_norm"] = 3.0;
    check_same_as_reference(c);
  }
  SECTION("no momentum, block clipping, decay_rate") {
    json c = base;
    c["optax"] = {{"momentum", nullptr}, {"clipping_threshold", 1.0}, {"decay_rate", 0.7}};
    check_same_as_reference(c);
  }
  SECTION("float32 momentum, small factoring threshold") {
    json c = base;
    c["optax"] = {{"dtype_momentum", "float32"}, {"min_dim_size_to_factor", 4}};
    check_same_as_reference(c);
  }
}

TEST_CASE("fused update: momentum_hp, sgd and scale equal the reference bit for bit", "[optim]") {
  json momentum = {{"lr", 0.1}, {"wd", 1e-3}, {"optax_name", "big_vision.momentum_hp"}};
  SECTION("bf16 trace") { check_same_as_reference(momentum); }
  SECTION("bf16 trace, nesterov, clipping") {
    json c = momentum;
    c["optax"] = {{"nesterov", true}};
    c["grad_clip_norm"] = 3.0;
    check_same_as_reference(c);
  }
  SECTION("float32 trace, nesterov") {
    json c = momentum;
    c["optax"] = {{"nesterov", true}, {"dtype", "float32"}};
    check_same_as_reference(c);
  }
  SECTION("float32 trace") {
    json c = momentum;
    c["optax"] = {{"dtype", nullptr}};
    check_same_as_reference(c);
  }
  SECTION("sgd") { check_same_as_reference({{"lr", 0.1}, {"optax_name", "big_vision.sgd"}}); }
  SECTION("scale, weight decay") {
    check_same_as_reference(
        {{"lr", 0.1}, {"wd", 0.1}, {"optax_name", "scale"}, {"optax", {{"step_size", 0.5}}}});
  }
}

TEST_CASE("fused update: state in place, a state() tensor still held is copied first", "[optim]") {
  json config = {{"lr", 0.01}, {"optax_name", "scale_by_adam"}};
  Tensors params = {{"w", at::zeros({4})}};
  Tensors grads = {{"w", at::ones({4})}};
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  opt.update(params, grads);
  const void* mu = state_map(opt).at("w/mu").data_ptr();  // (state_map's copy is gone again)
  opt.update(params, grads);
  CHECK(state_map(opt).at("w/mu").data_ptr() == mu);  // updated where it was
  optim::NamedTensors held = opt.state();
  at::Tensor mu_before = state_map(opt).at("w/mu").clone();
  opt.update(params, grads);
  at::Tensor held_mu;
  for (const auto& [name, t] : held) {
    if (name == "w/mu") held_mu = t;
  }
  CHECK(at::equal(held_mu, mu_before));  // what state() handed out did not change
  CHECK(held_mu.data_ptr() == mu);
  CHECK(state_map(opt).at("w/mu").data_ptr() != mu);
  // A view of it counts as held too.
  at::Tensor view = state_map(opt).at("w/nu").narrow(0, 1, 2);
  at::Tensor view_before = view.clone();
  opt.update(params, grads);
  CHECK(at::equal(view, view_before));
}

TEST_CASE("optimizer configs: errors name the culprit", "[optim]") {
  Shapes shapes = {{"a/kernel", {2}}};
  json ok = {{"lr", 0.1}, {"optax_name", "scale_by_adam"}};
  auto err = [&](json config) {
    return error_of([&] { optim::Optimizer(config, shapes, steps_ctx(10)); });
  };
  json c = ok;
  c["optax_name"] = "big_vision.lamb";
  CHECK(contains(err(c), "big_vision.lamb"));
  c = ok;
  c["optax"] = {{"beta1", 0.9}};
  CHECK(contains(err(c), "'beta1'"));
  c = ok;
  c["schedule"] = {{"decay_type", "cosine"}, {"warmup_step", 3}};
  CHECK(contains(err(c), "'warmup_step'"));
  c = ok;
  c["schedule"] = {{"base", 2.0}};
  CHECK(contains(err(c), "base"));
  c = ok;
  c.erase("lr");
  CHECK(contains(err(c), "'lr'"));
  c = ok;
  c.erase("optax_name");
  CHECK(contains(err(c), "optax_name"));
  c = ok;
  c["lr_mults"] = pairs({{"a/.*", 0.0}});
  CHECK(contains(err(c), "lr_mults"));
  c = ok;
  c["schedule"] = pairs({{"/a/.*", json::object()}});
  CHECK(contains(err(c), "/a/.*"));
  c = ok;
  c["optax"] = {{"mu_dtype", "int32"}};
  CHECK(contains(err(c), "mu_dtype"));

  optim::Optimizer opt(ok, shapes, steps_ctx(10));
  Tensors params = {{"a/kernel", at::zeros({2})}};
  CHECK(contains(error_of([&] { opt.update(params, {}); }), "no gradient for 'a/kernel'"));
  CHECK(contains(error_of([&] { opt.update(params, {{"a/kernel", at::zeros({3})}}); }), "[3]"));
  Tensors wrong = {{"b", at::zeros({2})}};
  CHECK(contains(error_of([&] { opt.update(wrong, {}); }), "'b'"));
  CHECK(opt.count() == 0);  // nothing happened
}

// ---- set_lr_multiplier ---------------------------------------------------------------------

namespace {

bool same_metrics(const optim::UpdateMetrics& a, const optim::UpdateMetrics& b) {
  return a.l2_grads == b.l2_grads && a.l2_updates == b.l2_updates && a.l2_params == b.l2_params &&
         a.global_schedule == b.global_schedule;
}

}  // namespace

TEST_CASE("lr multiplier: 1 leaves every bit as without it, fused and reference", "[optim]") {
  for (const char* name : {"scale_by_adam", "big_vision.sgd"}) {
    for (bool reference : {false, true}) {
      INFO(name << ", reference " << reference);
      json config = {{"lr", 0.01},
                     {"wd", 1e-2},
                     {"grad_clip_norm", 3.0},
                     {"optax_name", name},
                     {"schedule", mixed_schedule()},
                     {"_reference_update", reference}};
      Tensors pa = mixed_params(), pb = clone(pa);
      optim::Optimizer a(config, shapes_of(pa), steps_ctx(6)),
          b(config, shapes_of(pb), steps_ctx(6));
      b.set_lr_multiplier(2.5);
      b.set_lr_multiplier(1.0);
      CHECK(b.lr_multiplier() == 1.0);
      for (int step = 0; step < 5; ++step) {
        INFO("step " << step);
        Tensors g = mixed_grads(pa, step);
        CHECK(same_metrics(a.update(pa, g), b.update(pb, g)));
        for (const auto& [pname, p] : pa) CHECK(at::equal(p, pb.at(pname)));
        auto sa = state_map(a), sb = state_map(b);
        for (const auto& [sname, t] : sa) CHECK(at::equal(t, sb.at(sname)));
      }
    }
  }
}

TEST_CASE("lr multiplier: 0.5 halves the update and global_schedule, sgd and adam with wd",
          "[optim]") {
  for (const char* name : {"scale_by_adam", "big_vision.sgd"}) {
    for (bool reference : {false, true}) {
      INFO(name << ", reference " << reference);
      // wd decays a/kernel only (the default wd_mults); schedule(1) = 0.75 * 0.9 is no power of 2.
      json config = {{"lr", 0.1},
                     {"wd", 0.05},
                     {"optax_name", name},
                     {"schedule", {{"decay_type", "linear"}, {"mult", 0.75}}},
                     {"_reference_update", reference}};
      Tensors start = {{"a/kernel", at::linspace(-1, 2, 6).reshape({2, 3})},
                       {"a/bias", at::full({3}, 0.5)}};
      Tensors full = clone(start), half = clone(start);
      optim::Optimizer f(config, shapes_of(start), steps_ctx(10)),
          h(config, shapes_of(start), steps_ctx(10));
      Tensors g1 = {{"a/kernel", at::cos(at::arange(6.0)).reshape({2, 3})},
                    {"a/bias", at::sin(at::arange(3.0))}};
      f.update(full, g1);  // adam's moments are then not trivial
      h.update(half, g1);
      h.set_lr_multiplier(0.5);
      CHECK(h.lr_multiplier() == 0.5);
      Tensors before = clone(full), g2 = {{"a/kernel", at::linspace(1, 2, 6).reshape({2, 3})},
                                          {"a/bias", at::full({3}, 0.25)}};
      optim::UpdateMetrics mf = f.update(full, g2), mh = h.update(half, g2);
      REQUIRE(mf.global_schedule.size() == 1);
      CHECK(mf.global_schedule[0] == Approx(0.75 * 0.9));
      CHECK(mh.global_schedule[0] == 0.5 * mf.global_schedule[0]);
      CHECK(h.schedule(0, 1) == f.schedule(0, 1));  // the schedule itself is unmultiplied
      // The applied updates are halved exactly (their norm shows it); the parameters after them
      // differ from before + Δ/2 by the float rounding of that sum only.
      CHECK(mh.l2_updates == 0.5 * mf.l2_updates);
      CHECK(mf.l2_updates > 0);
      for (const auto& [pname, p] : before) {
        INFO(pname);
        at::Tensor df = full.at(pname) - p, dh = half.at(pname) - p;
        CHECK(at::allclose(dh, df * 0.5, /*rtol=*/0, /*atol=*/3e-7));
        CHECK(df.abs().min().item<float>() > 1e-3);
      }
      // The optimizer's state does not depend on the multiplier.
      auto sf = state_map(f), sh = state_map(h);
      for (const auto& [sname, t] : sf) CHECK(at::equal(t, sh.at(sname)));
    }
  }
}

TEST_CASE("lr multiplier: 0 freezes the parameters, bad values are refused", "[optim]") {
  json config = {{"lr", 0.1}, {"wd", 0.5}, {"optax_name", "scale_by_adam"}};
  Tensors params = {{"a/kernel", at::full({3}, 1.5)}};
  Tensors before = clone(params);
  optim::Optimizer opt(config, shapes_of(params), steps_ctx(10));
  CHECK(opt.lr_multiplier() == 1.0);
  opt.set_lr_multiplier(0);
  optim::UpdateMetrics m = opt.update(params, ones_like(params));
  CHECK(at::equal(params.at("a/kernel"), before.at("a/kernel")));
  CHECK(m.global_schedule == std::vector<double>{0.0});
  CHECK(m.l2_updates == 0.0);
  CHECK(opt.count() == 1);  // the state still advances
  CHECK(value(state_map(opt).at("a/kernel/mu")[0]) == Approx(0.1));
  for (double bad : {-0.5, std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    INFO(bad);
    std::string err = error_of([&] { opt.set_lr_multiplier(bad); });
    CHECK(contains(err, "optimizer: lr multiplier must be finite and >= 0, got "));
    CHECK(contains(err, bv::str(bad)));
  }
  CHECK(opt.lr_multiplier() == 0.0);  // a refused value changes nothing
}
