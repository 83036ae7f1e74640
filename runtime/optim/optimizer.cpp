#include "optim/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/quote.h"
#include "core/regex.h"
#include "core/tensor_util.h"
#include "optim/config_util.h"
#include "optim/schedule.h"
#include "optim/transforms.h"

namespace bv::optim {

using nlohmann::json;

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s + "]";
}

// The first of `patterns` that fullmatches `name` (big_vision's make_mask_trees), or -1.
int first_match(const std::vector<std::string>& patterns, const std::string& name) {
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (regex_fullmatch(patterns[i], name)) return static_cast<int>(i);
  }
  return -1;
}

// big_vision's names never start with '/', a common mistake when coming from Flax.
void check_pattern(const std::string& pattern, const std::string& what) {
  BV_CHECK(pattern.empty() || pattern[0] != '/', what, ": parameter names never start with '/': '",
           pattern, "'");
}

// Σ sum(t²) over `ts` as a float32 0-dim tensor (on the tensors' device); 0 for none. One read of
// each tensor (norm, then square the scalar) rather than materialising t².
at::Tensor sum_squares(const std::vector<at::Tensor>& ts, c10::Device device) {
  at::Tensor total;
  for (const auto& t : ts) {
    at::Tensor s = t.scalar_type() == at::kFloat ? t.norm() : t.to(at::kFloat).norm();
    s = s * s;
    total = total.defined() ? total + s.to(total.device()) : s;
  }
  return total.defined() ? total : at::zeros({}, at::TensorOptions(at::kFloat).device(device));
}

// State shaped like its parameter takes the parameter's strides: a model may keep parameters in
// another memory layout (BiT's kernels), and element-wise passes over mismatched strides are
// several times slower. Values are unchanged.
void match_layout(NamedTensors& state, const at::Tensor& p) {
  for (auto& [name, s] : state) {
    if (s.sizes() == p.sizes() && s.strides() != p.strides()) {
      s = at::empty_like(p, p.options().dtype(s.scalar_type())).copy_(s);
    }
  }
}

// Makes `state` fit for LeafTransform::update's in-place ops: on `p`'s device (a state loaded
// from a checkpoint arrives on the host), in its layout, and held by nobody else. A tensor that
// state() handed out and that is still held (a checkpoint being written, a test's copy) must
// not change, so it is replaced by a copy first, once.
void own_state(NamedTensors& state, const at::Tensor& p) {
  match_layout(state, p);
  for (auto& [name, s] : state) {
    if (s.device() != p.device()) {
      s = s.to(p.device());
    } else if (s.use_count() > 1 || s.storage().use_count() > 1) {
      s = s.clone();
    }
  }
}

// The multi-tensor ops of an update go over at most this many elements at once: their
// temporaries (a few per optimizer) are as large, and a few large ops cost no more launches
// than one. 2^24 float32 elements are 64 MiB.
constexpr int64_t kChunkElements = int64_t{1} << 24;

}  // namespace

struct Optimizer::Impl {
  struct Leaf {
    std::string name;
    std::vector<int64_t> shape;
    int schedule = -1;              // index into `schedules`; -1: frozen
    std::optional<double> lr_mult;  // from the first matching lr_mults entry
    std::optional<double> wd;       // wd * wd_mult, from the first matching wd_mults entry
    NamedTensors state;             // the optimizer's fields (none when frozen)
    bool owned = true;              // false: another process's; `state` holds meta tensors
  };
  std::vector<Leaf> leaves;  // sorted by name, as big_vision flattens its trees
  std::map<std::string, size_t> index;
  std::vector<Schedule> schedules;
  std::unique_ptr<LeafTransform> transform;
  bool reference = false;  // config._reference_update: LeafTransform::reference_update, per leaf
  double lr = 0;
  double lr_multiplier = 1;  // set_lr_multiplier: a factor on every schedule's value
  std::optional<double> clip_norm;
  int64_t count = 0;
  // ScheduleContext's fsdp fields.
  std::function<void(at::Tensor&)> sum_over_processes;
  c10::Device device = c10::Device(c10::kCPU);  // ctx.device: where owning nothing sums its zero
  std::set<std::string> replicated;
  bool count_replicated = true;

  // How much a leaf counts in the global norms: 0 for a replicated one another process counts.
  bool counted(const Leaf& leaf) const {
    return !sum_over_processes || count_replicated || !replicated.count(leaf.name);
  }

  const Leaf& leaf(const std::string& name) const {
    auto it = index.find(name);
    BV_CHECK(it != index.end(), "optimizer: no parameter named '", name, "'");
    return leaves[it->second];
  }
};

namespace {

// config.schedule as (regex, schedule object or null) entries: an object is one schedule for
// ".*"; a list holds [regex, object | null | false] pairs, null/false freezing what they match.
std::vector<std::pair<std::string, json>> schedule_entries(const json& config) {
  json sched = config.contains("schedule") ? config.at("schedule") : json::object();
  BV_CHECK(!sched.is_null(), "config.schedule is null, which would freeze every parameter; ",
           "use {} for a constant schedule");
  // Lua cannot tell {} from []: an empty list is the empty schedule too.
  if (sched.is_object() || (sched.is_array() && sched.empty())) {
    return {{".*", sched.is_object() ? sched : json::object()}};
  }
  BV_CHECK(sched.is_array(), "config.schedule must be an object or a list of [regex, schedule] ",
           "pairs, got ", snippet(sched.dump()));
  std::vector<std::pair<std::string, json>> out;
  for (size_t i = 0; i < sched.size(); ++i) {
    const json& e = sched[i];
    std::string what = str("config.schedule[", i + 1, "]");
    BV_CHECK(e.is_array() && e.size() == 2 && e[0].is_string(), what,
             " must be a [regex, schedule] pair, got ", snippet(e.dump()));
    const json& s = e[1];
    BV_CHECK(s.is_object() || s.is_null() || s == json(false), what,
             ": a schedule is an object, or null/false to freeze, got ", snippet(s.dump()));
    out.emplace_back(e[0].get<std::string>(), s.is_object() ? s : json(nullptr));
  }
  return out;
}

}  // namespace

Optimizer::Optimizer(const json& config,
                     const std::vector<std::pair<std::string, std::vector<int64_t>>>& params,
                     const ScheduleContext& ctx)
    : impl_(std::make_unique<Impl>()) {
  BV_CHECK(config.is_object(), "optimizer: the config must be an object, got ",
           snippet(config.dump()));
  // Options big_vision dropped: refuse them rather than silently ignore them.
  BV_CHECK(!config.contains("optim"), "config.optim is deprecated: use config.optax");
  BV_CHECK(!config.contains("weight_decay"), "config.weight_decay is deprecated: use config.wd");
  BV_CHECK(get_bool(config, "weight_decay_decouple", true, "config"),
           "config.weight_decay_decouple=false: coupled weight decay is not supported");
  BV_CHECK(!get_bool(config, "grad_clip_per_example", false, "config"),
           "config.grad_clip_per_example is not supported");

  Impl& m = *impl_;
  // Parameters, sorted by name.
  for (const auto& [name, shape] : params) {
    BV_CHECK(!m.index.count(name), "optimizer: parameter '", name, "' is given twice");
    m.index[name] = 0;
    m.leaves.push_back({name, shape, -1, std::nullopt, std::nullopt, {}});
  }
  std::sort(m.leaves.begin(), m.leaves.end(),
            [](const Impl::Leaf& a, const Impl::Leaf& b) { return a.name < b.name; });
  for (size_t i = 0; i < m.leaves.size(); ++i) m.index[m.leaves[i].name] = i;

  // Schedules: every parameter goes to the first entry that fullmatches its name.
  auto entries = schedule_entries(config);
  std::vector<std::string> patterns;
  std::vector<int> schedule_of_entry;
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& [pattern, sched] = entries[i];
    bool listed = config.contains("schedule") && config.at("schedule").is_array() &&
                  !config.at("schedule").empty();
    std::string what = listed ? str("config.schedule[", i + 1, "]") : "config.schedule";
    check_pattern(pattern, what);
    patterns.push_back(pattern);
    if (sched.is_null()) {
      schedule_of_entry.push_back(-1);
      continue;
    }
    BV_CHECK(!sched.contains("base"), what, ": 'base' is not allowed, the schedule's peak is ",
             "'mult' (the learning rate is config.lr)");
    json kw = sched;
    double mult = get_number(kw, "mult", 1.0, what);
    kw.erase("mult");
    schedule_of_entry.push_back(static_cast<int>(m.schedules.size()));
    m.schedules.emplace_back(kw, mult, ctx, what);
  }
  std::vector<std::string> uncovered;
  for (auto& leaf : m.leaves) {
    int e = first_match(patterns, leaf.name);
    if (e < 0) uncovered.push_back(leaf.name);
    else leaf.schedule = schedule_of_entry[e];
  }
  if (!uncovered.empty()) {
    std::string list;
    for (size_t i = 0; i < uncovered.size() && i < 10; ++i) list += (i ? ", " : "") + uncovered[i];
    if (uncovered.size() > 10) list += str(", ... (", uncovered.size(), " in all)");
    fail("config.schedule: All params must be covered (use null for freezing): ", list);
  }

  // The optimizer.
  BV_CHECK(has_value(config, "optax_name"), "config has no 'optax_name' (the optimizer)");
  std::string name = get_string(config, "optax_name", "", "config");
  m.transform = make_transform(name, config.contains("optax") ? config.at("optax") : json());
  // Not a big_vision key (a training config cannot set it): tests and scripts/bench_optim.lua
  // compare the fused update with the plain one.
  m.reference = get_bool(config, "_reference_update", false, "config");

  BV_CHECK(has_value(config, "lr"), "config has no 'lr' (the learning rate)");
  m.lr = get_number(config, "lr", 0, "config");

  if (config.contains("lr_mults")) {
    auto mults = get_regex_mults(config.at("lr_mults"), "config.lr_mults");
    std::vector<std::string> pats;
    for (const auto& [pattern, mult] : mults) {
      check_pattern(pattern, "config.lr_mults");
      BV_CHECK(mult > 0, "config.lr_mults: multiplier ", mult, " for '", pattern,
               "' must be > 0 (freeze parameters with a null schedule instead)");
      pats.push_back(pattern);
    }
    for (auto& leaf : m.leaves) {
      int e = first_match(pats, leaf.name);
      if (e >= 0) leaf.lr_mult = mults[e].second;
    }
  }

  double wd = get_number(config, "wd", 0, "config");
  if (wd != 0) {
    std::vector<std::pair<std::string, double>> mults = {{".*/kernel$", 1.0}};
    if (has_value(config, "wd_mults")) {
      mults = get_regex_mults(config.at("wd_mults"), "config.wd_mults");
    }
    std::vector<std::string> pats;
    for (const auto& entry : mults) {
      check_pattern(entry.first, "config.wd_mults");
      pats.push_back(entry.first);
    }
    for (auto& leaf : m.leaves) {
      int e = first_match(pats, leaf.name);
      if (e >= 0) leaf.wd = wd * mults[e].second;
    }
  }

  double clip = get_number(config, "grad_clip_norm", 0, "config");
  if (clip != 0) m.clip_norm = clip;

  m.sum_over_processes = ctx.sum_over_processes;
  m.device = ctx.device;
  m.replicated = ctx.replicated;
  m.count_replicated = ctx.count_replicated;
  for (const auto& name : m.replicated) {
    BV_CHECK(m.index.count(name), "optimizer: replicated parameter '", name, "' does not exist");
  }
  if (ctx.owned) {
    for (const auto& name : *ctx.owned) {
      BV_CHECK(m.index.count(name), "optimizer: owned parameter '", name, "' does not exist");
    }
    for (auto& leaf : m.leaves) leaf.owned = ctx.owned->count(leaf.name) > 0;
  }
  // Frozen parameters keep no state at all; another process's keep only shapes and dtypes (on
  // the meta device: no memory, nothing written).
  for (auto& leaf : m.leaves) {
    if (leaf.schedule < 0) continue;
    leaf.state = m.transform->init(leaf.shape, leaf.owned ? ctx.device : c10::Device(at::kMeta));
  }
}

Optimizer::~Optimizer() = default;

UpdateMetrics Optimizer::update(std::map<std::string, at::Tensor>& params,
                                const std::map<std::string, at::Tensor>& grads, bool all_norms) {
  at::NoGradGuard no_grad;  // parameters usually require grad; their update is no graph
  Impl& m = *impl_;

  // Check everything before changing anything.
  for (const auto& [name, t] : params) m.leaf(name);
  for (const auto& [name, t] : grads) {
    BV_CHECK(m.index.count(name), "optimizer: a gradient for '", name,
             "', which is not a parameter");
  }
  std::vector<at::Tensor> g(m.leaves.size());
  std::vector<at::Tensor> trainable_grads;
  for (size_t i = 0; i < m.leaves.size(); ++i) {
    const auto& leaf = m.leaves[i];
    auto p = params.find(leaf.name);
    BV_CHECK(p != params.end(), "optimizer: parameter '", leaf.name, "' is missing");
    BV_CHECK(p->second.defined() && p->second.sizes().vec() == leaf.shape, "optimizer: parameter '",
             leaf.name, "' has shape ", p->second.defined() ? shape_string(p->second) : "?",
             ", expected ", shape_str(leaf.shape));
    if (leaf.schedule < 0) continue;
    auto it = grads.find(leaf.name);
    BV_CHECK(it != grads.end() && it->second.defined(), "optimizer: no gradient for '", leaf.name,
             "'");
    BV_CHECK(it->second.sizes().vec() == leaf.shape, "optimizer: gradient of '", leaf.name,
             "' has shape ", shape_string(it->second), ", expected ", shape_str(leaf.shape));
    BV_CHECK(at::isFloatingType(it->second.scalar_type()), "optimizer: gradient of '", leaf.name,
             "' is ", dtype_name(it->second.scalar_type()), ", not a float");
    g[i] = it->second.to(at::kFloat);
    if (m.counted(leaf)) trainable_grads.push_back(g[i]);
  }

  // The parameters' device; a process that owns none of them under fsdp sums its zero on the
  // device it was told (ctx.device), so that its part of the collective is a device tensor like
  // everyone else's (a host one would go to the host group: a hang on NCCL).
  c10::Device device = params.empty() ? m.device : params.begin()->second.device();
  // l2_grads and gradient clipping both see the non-frozen gradients only. With fsdp each
  // process holds a part: the squares are summed over processes, in float64 on the device (the
  // collective takes device tensors). Nothing here reads a value on the host: the norms stay on
  // the device until the metrics below, at the steps that log them.
  auto global_norm = [&](const std::vector<at::Tensor>& ts) {
    at::Tensor sq = sum_squares(ts, device);
    if (!m.sum_over_processes) return sq.sqrt();
    at::Tensor wide = sq.to(at::kDouble).reshape({1});
    m.sum_over_processes(wide);
    return wide.reshape({}).to(at::kFloat).sqrt();
  };
  // Clipping needs the norm at every step; otherwise it is computed at the steps that log it.
  at::Tensor grad_norm;
  if (m.clip_norm || all_norms) grad_norm = global_norm(trainable_grads);
  // The schedules' float values times the multiplier, rounded back to float: x * 1.0 == x exactly
  // in IEEE arithmetic, so the default multiplier leaves every bit as it was. Both update paths
  // below (fused and reference) and global_schedule read `sched` only.
  std::vector<float> sched(m.schedules.size());
  for (size_t s = 0; s < sched.size(); ++s) {
    sched[s] = static_cast<float>(m.schedules[s](m.count) * m.lr_multiplier);
  }

  std::vector<at::Tensor> updates, all_params;
  if (m.reference) {
    for (size_t i = 0; i < m.leaves.size(); ++i) {
      auto& leaf = m.leaves[i];
      at::Tensor& p = params.at(leaf.name);
      if (leaf.schedule >= 0 && leaf.owned) {
        at::Tensor gi = g[i];
        if (m.clip_norm) {
          // optax.clip_by_global_norm: g / ||g|| * c once ||g|| reaches c.
          gi = at::where(grad_norm < *m.clip_norm, gi, gi / grad_norm * *m.clip_norm);
        }
        // Δθ = -sched(k) * (lr * lr_mult * opt(g) + wd * wd_mult * θ), in optax's chain order.
        // The scalars are folded first, so that the update is one or two passes over memory.
        match_layout(leaf.state, p);
        at::Tensor u = m.transform->reference_update(gi, leaf.state, m.count);
        double k = static_cast<double>(sched[leaf.schedule]);
        double lr = m.lr * (leaf.lr_mult ? *leaf.lr_mult : 1.0);
        u = leaf.wd ? at::mul(p, -k * *leaf.wd).add_(u, -k * lr) : at::mul(u, -k * lr);
        p.add_(u);
        if (m.counted(leaf)) updates.push_back(u);
      }
      if (m.counted(leaf)) all_params.push_back(p);  // frozen ones stay exactly as they were
    }
  } else {
    // The same arithmetic as above, element for element, with multi-tensor ops over chunks of
    // leaves and the state changed in place.
    std::vector<size_t> live;  // the leaves updated here
    for (size_t i = 0; i < m.leaves.size(); ++i) {
      const auto& leaf = m.leaves[i];
      if (leaf.schedule >= 0 && leaf.owned) live.push_back(i);
      if (m.counted(leaf)) all_params.push_back(params.at(leaf.name));
    }
    at::Tensor unclipped;
    if (m.clip_norm) unclipped = grad_norm < *m.clip_norm;
    for (size_t start = 0; start < live.size();) {
      size_t end = start;
      int64_t elements = 0;
      while (end < live.size() && (end == start || elements < kChunkElements)) {
        elements += g[live[end++]].numel();
      }
      std::vector<at::Tensor> ps, gs;
      std::vector<NamedTensors*> states;
      for (size_t j = start; j < end; ++j) {
        auto& leaf = m.leaves[live[j]];
        ps.push_back(params.at(leaf.name));
        gs.push_back(g[live[j]]);
        own_state(leaf.state, ps.back());
        states.push_back(&leaf.state);
      }
      if (m.clip_norm) {
        std::vector<at::Tensor> clipped = at::_foreach_div(gs, grad_norm);
        at::_foreach_mul_(clipped, *m.clip_norm);
        for (size_t j = 0; j < gs.size(); ++j) {
          at::where_out(clipped[j], unclipped, gs[j], clipped[j]);
        }
        gs = std::move(clipped);
      }
      std::vector<at::Tensor> us = m.transform->update(gs, states, m.count);
      gs.clear();
      // Leaves with the same scalars (schedule, lr_mult, weight decay) share each op.
      std::map<std::tuple<bool, double, double>, std::vector<size_t>> groups;
      for (size_t j = start; j < end; ++j) {
        const auto& leaf = m.leaves[live[j]];
        double k = static_cast<double>(sched[leaf.schedule]);
        double lr = m.lr * (leaf.lr_mult ? *leaf.lr_mult : 1.0);
        groups[{leaf.wd.has_value(), -k * lr, leaf.wd ? -k * *leaf.wd : 0.0}].push_back(j - start);
      }
      std::vector<at::Tensor> deltas(us.size());
      for (const auto& [key, members] : groups) {
        auto [decays, lr_scale, wd_scale] = key;
        std::vector<at::Tensor> u, p;
        for (size_t j : members) {
          u.push_back(us[j]);
          p.push_back(ps[j]);
        }
        std::vector<at::Tensor> d;
        if (decays) {
          d = at::_foreach_mul(p, wd_scale);
          at::_foreach_add_(d, u, lr_scale);
        } else {
          d = at::_foreach_mul(u, lr_scale);
        }
        for (size_t n = 0; n < members.size(); ++n) deltas[members[n]] = std::move(d[n]);
      }
      us.clear();
      at::_foreach_add_(ps, deltas);
      if (all_norms) {
        for (size_t j = start; j < end; ++j) {
          if (m.counted(m.leaves[live[j]])) updates.push_back(deltas[j - start]);
        }
      }
      start = end;
    }
  }
  ++m.count;

  UpdateMetrics metrics;
  if (all_norms) {
    // One transfer for the three norms: the step's one host read, at the steps that log.
    at::Tensor norms =
        at::stack({grad_norm, global_norm(updates), global_norm(all_params)}).to(at::kCPU);
    auto acc = norms.accessor<float, 1>();
    metrics.l2_grads = acc[0];
    metrics.l2_updates = acc[1];
    metrics.l2_params = acc[2];
  } else {
    metrics.l2_grads = metrics.l2_updates = metrics.l2_params =
        std::numeric_limits<double>::quiet_NaN();
  }
  metrics.global_schedule.assign(sched.begin(), sched.end());
  return metrics;
}

int64_t Optimizer::count() const { return impl_->count; }

bool Optimizer::frozen(const std::string& name) const { return impl_->leaf(name).schedule < 0; }

bool Optimizer::rows_independent(const std::string& name) const {
  return impl_->transform->rows_independent(impl_->leaf(name).shape);
}

int Optimizer::num_schedules() const { return static_cast<int>(impl_->schedules.size()); }

double Optimizer::schedule(int index, int64_t count) const {
  BV_CHECK(index >= 0 && index < num_schedules(), "optimizer: schedule ", index,
           " does not exist (there are ", num_schedules(), ")");
  return impl_->schedules[index](count);
}

void Optimizer::set_lr_multiplier(double m) {
  BV_CHECK(std::isfinite(m) && m >= 0, "optimizer: lr multiplier must be finite and >= 0, got ", m);
  impl_->lr_multiplier = m;
}

double Optimizer::lr_multiplier() const { return impl_->lr_multiplier; }

NamedTensors Optimizer::state() const {
  NamedTensors out;
  out.emplace_back("count", at::scalar_tensor(impl_->count, at::kLong));
  for (const auto& leaf : impl_->leaves) {
    if (!leaf.owned) continue;
    for (const auto& [field, t] : leaf.state) out.emplace_back(leaf.name + "/" + field, t);
  }
  return out;
}

std::vector<StateSpec> Optimizer::state_spec() const {
  std::vector<StateSpec> out;
  for (const auto& leaf : impl_->leaves) {
    for (const auto& [field, t] : leaf.state) {
      out.push_back(
          {leaf.name + "/" + field, leaf.name, t.sizes().vec(), t.scalar_type(), leaf.owned});
    }
  }
  return out;
}

namespace {

// The state's "count": one whole number >= 0.
int64_t count_of(const at::Tensor& c) {
  BV_CHECK(c.defined() && c.numel() == 1, "optimizer state: 'count' must hold one number");
  double count = c.to(at::kDouble).item<double>();
  BV_CHECK(count >= 0 && count == static_cast<double>(static_cast<int64_t>(count)),
           "optimizer state: 'count' must be a whole number >= 0, got ", count);
  return static_cast<int64_t>(count);
}

}  // namespace

void Optimizer::load_state(const NamedTensors& state) {
  Impl& m = *impl_;
  std::map<std::string, at::Tensor> given;
  for (const auto& [name, t] : state) {
    BV_CHECK(given.emplace(name, t).second, "optimizer state: '", name, "' is given twice");
  }
  std::vector<std::string> missing, unexpected;
  std::set<std::string> expected = {"count"}, elsewhere;  // elsewhere: another process's
  for (const auto& leaf : m.leaves) {
    for (const auto& [field, t] : leaf.state) {
      (leaf.owned ? expected : elsewhere).insert(leaf.name + "/" + field);
    }
  }
  for (const auto& name : expected) {
    if (!given.count(name)) missing.push_back(name);
  }
  for (const auto& [name, t] : given) {
    if (!expected.count(name) && !elsewhere.count(name)) unexpected.push_back(name);
  }
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
    return names.size() > 5 ? str(s, ", ... (", names.size(), " in all)") : s;
  };
  BV_CHECK(missing.empty(), "optimizer state: missing ", list(missing));
  BV_CHECK(unexpected.empty(), "optimizer state: unexpected ", list(unexpected),
           " (not this optimizer's state)");

  int64_t count = count_of(given.at("count"));

  // Build the new state first, so a bad tensor leaves the optimizer as it was.
  std::vector<NamedTensors> fresh;
  for (const auto& leaf : m.leaves) {
    NamedTensors s;
    if (!leaf.owned) {
      fresh.push_back(leaf.state);
      continue;
    }
    for (const auto& [field, mine] : leaf.state) {
      std::string name = leaf.name + "/" + field;
      const at::Tensor& t = given.at(name);
      BV_CHECK(t.defined() && t.sizes() == mine.sizes(), "optimizer state: '", name, "' has shape ",
               t.defined() ? shape_string(t) : "?", ", expected ", shape_string(mine));
      // A copy: the caller may reuse its tensors, and ours are never changed in place anyway.
      s.emplace_back(field, t.to(t.device(), mine.scalar_type(), false, /*copy=*/true));
    }
    fresh.push_back(std::move(s));
  }
  for (size_t i = 0; i < m.leaves.size(); ++i) m.leaves[i].state = std::move(fresh[i]);
  m.count = count;
}

void Optimizer::load_state_tensor(const std::string& name, const at::Tensor& t) {
  Impl& m = *impl_;
  if (name == "count") {
    m.count = count_of(t);
    return;
  }
  size_t slash = name.rfind('/');
  auto it = slash == std::string::npos ? m.index.end() : m.index.find(name.substr(0, slash));
  if (it != m.index.end()) {
    Impl::Leaf& leaf = m.leaves[it->second];
    for (auto& [field, mine] : leaf.state) {
      if (field != name.substr(slash + 1)) continue;
      BV_CHECK(leaf.owned, "optimizer state: '", name, "' is another process's to load");
      BV_CHECK(t.defined() && t.sizes() == mine.sizes(), "optimizer state: '", name, "' has shape ",
               t.defined() ? shape_string(t) : "?", ", expected ", shape_string(mine));
      at::NoGradGuard no_grad;
      mine.copy_(t);
      return;
    }
  }
  fail("optimizer state: unexpected '", name, "' (not this optimizer's state)");
}

}  // namespace bv::optim
