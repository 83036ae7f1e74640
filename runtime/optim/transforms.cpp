#include "optim/transforms.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/tensor_util.h"
#include "optim/config_util.h"

namespace bv::optim {

using nlohmann::json;

namespace {

// An accumulator dtype option: a floating dtype name, or null for float32 (our parameters'
// dtype, which is what optax's None means).
at::ScalarType get_dtype(const json& kw, const std::string& key, const char* fallback,
                         const std::string& what) {
  if (!kw.is_object() || !kw.contains(key)) {
    return fallback ? dtype_from_name(fallback) : at::kFloat;
  }
  if (kw.at(key).is_null()) return at::kFloat;
  at::ScalarType t = dtype_from_name(get_string(kw, key, "", what));
  BV_CHECK(at::isFloatingType(t), what, ".", key, " must be a floating dtype, got '", dtype_name(t),
           "'");
  return t;
}

at::Tensor zeros(const std::vector<int64_t>& shape, c10::Device device,
                 at::ScalarType dtype = at::kFloat) {
  return at::zeros(shape, at::TensorOptions().dtype(dtype).device(device));
}

// `x` as the nearest value of dtype `t`. jnp turns a Python float that meets a bf16 array into
// bf16 first (0.9 -> 0.8984375); libtorch's kernels differ between versions and devices here, so
// the decays that multiply low-precision accumulators are rounded explicitly.
double round_to(double x, at::ScalarType t) {
  return at::scalar_tensor(x, at::TensorOptions().dtype(t)).item<double>();
}

// State is made on the parameters' device (ScheduleContext::device); one loaded from a
// checkpoint arrives on the host, and its first update moves it to its parameter's device.
at::Tensor on(const at::Tensor& state, const at::Tensor& like) {
  return state.device() == like.device() ? state : state.to(like.device());
}

// Field `k` of every state, as a list for the multi-tensor ops (the same tensors, not copies).
std::vector<at::Tensor> field(const std::vector<NamedTensors*>& states, size_t k) {
  std::vector<at::Tensor> out;
  out.reserve(states.size());
  for (const NamedTensors* s : states) out.push_back((*s)[k].second);
  return out;
}

// optax.scale(step_size): u = step_size * g.
class Scale : public LeafTransform {
 public:
  explicit Scale(double step_size) : step_size_(step_size) {}
  NamedTensors init(const std::vector<int64_t>&, c10::Device) const override { return {}; }
  std::vector<at::Tensor> update(const std::vector<at::Tensor>& gs,
                                 const std::vector<NamedTensors*>&, int64_t) const override {
    return at::_foreach_mul(gs, step_size_);
  }
  at::Tensor reference_update(const at::Tensor& g, NamedTensors&, int64_t) const override {
    return g * step_size_;
  }

 private:
  double step_size_;
};

// big_vision.sgd = optax.identity.
class Identity : public LeafTransform {
 public:
  NamedTensors init(const std::vector<int64_t>&, c10::Device) const override { return {}; }
  std::vector<at::Tensor> update(const std::vector<at::Tensor>& gs,
                                 const std::vector<NamedTensors*>&, int64_t) const override {
    return gs;
  }
  at::Tensor reference_update(const at::Tensor& g, NamedTensors&, int64_t) const override {
    return g;
  }
};

// big_vision.momentum_hp = optax.trace: t = g + m*t, kept in `dtype`. As in jnp, m*t is computed
// in the accumulator's dtype (m itself rounded to it); the update is the float32 t before it is
// cast for storage; nesterov returns g + m*t with that float32 t.
class Trace : public LeafTransform {
 public:
  Trace(double momentum, at::ScalarType dtype, bool nesterov)
      : m_(momentum), m_acc_(round_to(momentum, dtype)), dtype_(dtype), nesterov_(nesterov) {}
  NamedTensors init(const std::vector<int64_t>& shape, c10::Device device) const override {
    return {{"trace", zeros(shape, device, dtype_)}};
  }
  std::vector<at::Tensor> update(const std::vector<at::Tensor>& gs,
                                 const std::vector<NamedTensors*>& states, int64_t) const override {
    std::vector<at::Tensor> trace = field(states, 0);
    at::_foreach_mul_(trace, m_acc_);  // m*t in the trace's dtype, as the reference
    std::vector<at::Tensor> t;         // the float32 t = g + m*t
    if (dtype_ == at::kFloat) {
      at::_foreach_add_(trace, gs);  // m*t + g: the same sum
      t = trace;
    } else {
      t = at::_foreach_add(gs, trace);
      at::_foreach_copy_(trace, t);  // rounded to the trace's dtype, as .to() rounds
    }
    if (!nesterov_) return t;
    std::vector<at::Tensor> u = at::_foreach_mul(t, m_);
    at::_foreach_add_(u, gs);  // t*m + g
    return u;
  }
  at::Tensor reference_update(const at::Tensor& g, NamedTensors& state, int64_t) const override {
    at::Tensor t = g + on(state[0].second, g) * m_acc_;
    at::Tensor u = nesterov_ ? g + t * m_ : t;
    state[0].second = t.to(dtype_);
    return u;
  }

 private:
  double m_, m_acc_;
  at::ScalarType dtype_;
  bool nesterov_;
};

// optax.scale_by_adam: bias-corrected moments, eps outside the square root; mu optionally
// stored in a lower precision (the update uses the float32 value before the cast).
class Adam : public LeafTransform {
 public:
  Adam(double b1, double b2, double eps, double eps_root, at::ScalarType mu_dtype, bool nesterov)
      : b1_(b1), b1_acc_(round_to(b1, mu_dtype)), b2_(b2), eps_(eps), eps_root_(eps_root),
        mu_dtype_(mu_dtype), nesterov_(nesterov) {}
  NamedTensors init(const std::vector<int64_t>& shape, c10::Device device) const override {
    return {{"mu", zeros(shape, device, mu_dtype_)}, {"nu", zeros(shape, device)}};
  }
  std::vector<at::Tensor> update(const std::vector<at::Tensor>& gs,
                                 const std::vector<NamedTensors*>& states,
                                 int64_t count) const override {
    std::vector<at::Tensor> mu = field(states, 0), nu = field(states, 1);
    // mu = (1-b1) g + b1 mu (b1*mu in mu's dtype); `mu32` is it in float32, before mu is stored.
    at::_foreach_mul_(mu, b1_acc_);
    std::vector<at::Tensor> mu32 = at::_foreach_mul(gs, 1 - b1_);
    if (mu_dtype_ == at::kFloat) {
      at::_foreach_add_(mu, mu32);
      mu32 = mu;
    } else {
      at::_foreach_add_(mu32, mu);
      at::_foreach_copy_(mu, mu32);
    }
    // nu = (1-b2) g² + b2 nu.
    at::_foreach_mul_(nu, b2_);
    {
      std::vector<at::Tensor> g2 = at::_foreach_mul(gs, gs);
      at::_foreach_mul_(g2, 1 - b2_);
      at::_foreach_add_(nu, g2);
    }
    int64_t c = count + 1;
    std::vector<at::Tensor> u;  // mu_hat, then the update
    if (nesterov_) {
      u = at::_foreach_div(mu32, correction(b1_, c + 1));
      at::_foreach_mul_(u, b1_);
      std::vector<at::Tensor> g_hat = at::_foreach_div(gs, correction(b1_, c));
      at::_foreach_mul_(g_hat, 1 - b1_);
      at::_foreach_add_(u, g_hat);
    } else {
      u = at::_foreach_div(mu32, correction(b1_, c));
    }
    mu32.clear();
    std::vector<at::Tensor> denom = at::_foreach_div(nu, correction(b2_, c));
    // x + 0 is x for every x but -0, and nu / c2 is never -0 (a sum of +0 or positive terms).
    if (eps_root_ != 0) at::_foreach_add_(denom, eps_root_);
    at::_foreach_sqrt_(denom);
    at::_foreach_add_(denom, eps_);
    at::_foreach_div_(u, denom);
    return u;
  }
  at::Tensor reference_update(const at::Tensor& g, NamedTensors& state,
                              int64_t count) const override {
    at::Tensor mu = g * (1 - b1_) + on(state[0].second, g) * b1_acc_;
    at::Tensor nu = g * g * (1 - b2_) + on(state[1].second, g) * b2_;
    int64_t c = count + 1;
    at::Tensor mu_hat = mu / correction(b1_, c);
    if (nesterov_) mu_hat = mu / correction(b1_, c + 1) * b1_ + g / correction(b1_, c) * (1 - b1_);
    at::Tensor nu_hat = nu / correction(b2_, c);
    at::Tensor u = mu_hat / ((nu_hat + eps_root_).sqrt() + eps_);
    state[0].second = mu.to(mu_dtype_);
    state[1].second = nu;
    return u;
  }

 private:
  // 1 - decay^count, in float32 as optax computes it.
  static double correction(double decay, int64_t count) {
    return 1.0f - std::pow(static_cast<float>(decay), static_cast<float>(count));
  }
  double b1_, b1_acc_, b2_, eps_, eps_root_;
  at::ScalarType mu_dtype_;
  bool nesterov_;
};

// big_vision.scale_by_adafactor: optax's factored RMS scaling with
// beta2(k) = min(cap, 1 - (k - offset + 1)^-decay_rate), optional per-leaf RMS clipping, then an
// EMA of the updates (no debiasing) kept in `dtype_momentum`.
class Adafactor : public LeafTransform {
 public:
  struct Options {
    int64_t min_dim_size_to_factor = 32;
    double decay_rate = 0.8, decay_offset = 0, beta2_cap = 0.999, eps = 1e-30;
    std::optional<double> clipping_threshold, momentum = 0.9;
    at::ScalarType dtype_momentum = at::kBFloat16;
  };
  explicit Adafactor(const Options& o)
      : o_(o), m_acc_(o.momentum ? round_to(*o.momentum, o.dtype_momentum) : 0) {}

  NamedTensors init(const std::vector<int64_t>& shape, c10::Device device) const override {
    auto [d1, d0] = factored_dims(shape, o_.min_dim_size_to_factor);
    NamedTensors s;
    if (d0 >= 0) {
      s = {{"v_row", zeros(without(shape, d0), device)},
           {"v_col", zeros(without(shape, d1), device)},
           {"v", zeros({1}, device)}};
    } else {
      s = {{"v_row", zeros({1}, device)},
           {"v_col", zeros({1}, device)},
           {"v", zeros(shape, device)}};
    }
    if (o_.momentum) s.emplace_back("ema", zeros(shape, device, o_.dtype_momentum));
    return s;
  }

  std::vector<at::Tensor> update(const std::vector<at::Tensor>& gs,
                                 const std::vector<NamedTensors*>& states,
                                 int64_t count) const override {
    auto [keep, take] = decay(count);
    std::vector<at::Tensor> us(gs.size());
    for (size_t i = 0; i < gs.size(); ++i) {
      const at::Tensor& g = gs[i];
      NamedTensors& state = *states[i];
      auto [d1, d0] = factored_dims(g.sizes().vec(), o_.min_dim_size_to_factor);
      at::Tensor g2 = g * g;
      g2.add_(o_.eps);
      if (d0 >= 0) {
        // row = keep*row + take*mean(g2), and col the same: each product rounded, then the sum.
        at::Tensor& row = state[0].second;
        at::Tensor& col = state[1].second;
        at::Tensor row_mean = g2.mean(d0), col_mean = g2.mean(d1);
        row.mul_(keep).add_(row_mean.mul_(take));
        col.mul_(keep).add_(col_mean.mul_(take));
        int64_t reduced_d1 = d1 > d0 ? d1 - 1 : d1;
        at::Tensor row_factor = (row / row.mean(reduced_d1, /*keepdim=*/true)).rsqrt();
        us[i] = at::mul_out(g2, g, row_factor.unsqueeze(d0));  // g2 is spent: its memory
        us[i].mul_(col.rsqrt().unsqueeze(d1));
      } else {
        at::Tensor& v = state[2].second;
        v.mul_(keep).add_(g2.mul_(take));
        us[i] = at::rsqrt_out(g2, v).mul_(g);  // rsqrt(v) * g: the same product as g * rsqrt(v)
      }
      if (o_.clipping_threshold) {
        us[i].div_(at::clamp_min(us[i].square().mean().sqrt() / *o_.clipping_threshold, 1.0));
      }
    }
    if (!o_.momentum) return us;
    // ema = (1-m) u + m ema (m*ema in the EMA's dtype); the update is the float32 ema.
    std::vector<at::Tensor> ema = field(states, 3);
    at::_foreach_mul_(ema, m_acc_);
    at::_foreach_mul_(us, 1 - *o_.momentum);
    if (o_.dtype_momentum == at::kFloat) {
      at::_foreach_add_(ema, us);
      return ema;
    }
    at::_foreach_add_(us, ema);
    at::_foreach_copy_(ema, us);
    return us;
  }

  at::Tensor reference_update(const at::Tensor& g, NamedTensors& state,
                              int64_t count) const override {
    auto [keep, take] = decay(count);
    auto [d1, d0] = factored_dims(g.sizes().vec(), o_.min_dim_size_to_factor);
    at::Tensor g2 = g * g + o_.eps;
    at::Tensor u;
    if (d0 >= 0) {
      at::Tensor row = on(state[0].second, g) * keep + g2.mean(d0) * take;
      at::Tensor col = on(state[1].second, g) * keep + g2.mean(d1) * take;
      int64_t reduced_d1 = d1 > d0 ? d1 - 1 : d1;  // d1's index once d0 is gone
      at::Tensor row_factor = (row / row.mean(reduced_d1, /*keepdim=*/true)).rsqrt();
      u = g * row_factor.unsqueeze(d0) * col.rsqrt().unsqueeze(d1);
      state[0].second = row;
      state[1].second = col;
      state[2].second = on(state[2].second, g);  // the unused placeholder follows too
    } else {
      at::Tensor v = on(state[2].second, g) * keep + g2 * take;
      u = g * v.rsqrt();
      state[0].second = on(state[0].second, g);  // the unused placeholders follow too
      state[1].second = on(state[1].second, g);
      state[2].second = v;
    }
    if (o_.clipping_threshold) {
      // optax.clip_by_block_rms: u / max(1, rms(u) / threshold).
      u = u / at::clamp_min(u.square().mean().sqrt() / *o_.clipping_threshold, 1.0);
    }
    if (o_.momentum) {
      double m = *o_.momentum;
      at::Tensor ema = u * (1 - m) + on(state[3].second, g) * m_acc_;
      state[3].second = ema.to(o_.dtype_momentum);
      u = ema;
    }
    return u;
  }

  // Factoring over dim 0 mixes rows, and the RMS clipping is over the whole tensor.
  bool rows_independent(const std::vector<int64_t>& shape) const override {
    auto [d1, d0] = factored_dims(shape, o_.min_dim_size_to_factor);
    return !o_.clipping_threshold && d1 != 0 && d0 != 0;
  }

 private:
  // (beta2, 1 - beta2) at update `count`: float32 throughout, as jnp computes t = float32(k) + 1
  // and the power.
  std::pair<double, double> decay(int64_t count) const {
    float t = static_cast<float>(count - static_cast<int64_t>(o_.decay_offset)) + 1.0f;
    float beta2 = std::min(static_cast<float>(o_.beta2_cap),
                           1.0f - std::pow(t, -static_cast<float>(o_.decay_rate)));
    return {beta2, 1.0f - beta2};
  }
  static std::vector<int64_t> without(std::vector<int64_t> shape, int axis) {
    shape.erase(shape.begin() + axis);
    return shape;
  }
  Options o_;
  double m_acc_;  // the momentum as the EMA's dtype holds it
};

}  // namespace

std::pair<int, int> factored_dims(const std::vector<int64_t>& shape,
                                  int64_t min_dim_size_to_factor) {
  if (shape.size() < 2) return {-1, -1};
  std::vector<int> order(shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return shape[a] < shape[b]; });
  int d1 = order[order.size() - 2], d0 = order.back();
  if (shape[d1] < min_dim_size_to_factor) return {-1, -1};
  return {d1, d0};
}

std::unique_ptr<LeafTransform> make_transform(const std::string& name, const json& kw) {
  const std::string what = "optax (for " + name + ")";
  BV_CHECK(kw.is_null() || kw.is_object(), "config.optax must be an object, got ", kw.dump());
  if (name == "big_vision.scale_by_adafactor") {
    check_keys(kw,
               {"min_dim_size_to_factor", "decay_rate", "decay_offset", "beta2_cap",
                "clipping_threshold", "momentum", "dtype_momentum", "eps"},
               what);
    Adafactor::Options o;
    double min_dim = get_number(kw, "min_dim_size_to_factor", 32, what);
    BV_CHECK(min_dim == std::floor(min_dim), what, ".min_dim_size_to_factor must be an integer");
    o.min_dim_size_to_factor = static_cast<int64_t>(min_dim);
    o.decay_rate = get_number(kw, "decay_rate", 0.8, what);
    o.decay_offset = get_number(kw, "decay_offset", 0, what);
    o.beta2_cap = get_number(kw, "beta2_cap", 0.999, what);
    o.eps = get_number(kw, "eps", 1e-30, what);
    // big_vision skips clipping and momentum when they are None or 0.
    o.clipping_threshold = get_optional_number(kw, "clipping_threshold", what);
    if (o.clipping_threshold && *o.clipping_threshold == 0) o.clipping_threshold.reset();
    if (kw.is_object() && kw.contains("momentum")) {
      o.momentum = get_optional_number(kw, "momentum", what);
    }
    if (o.momentum && *o.momentum == 0) o.momentum.reset();
    o.dtype_momentum = get_dtype(kw, "dtype_momentum", "bfloat16", what);
    return std::make_unique<Adafactor>(o);
  }
  if (name == "scale_by_adam") {
    check_keys(kw, {"b1", "b2", "eps", "eps_root", "mu_dtype", "nesterov"}, what);
    return std::make_unique<Adam>(
        get_number(kw, "b1", 0.9, what), get_number(kw, "b2", 0.999, what),
        get_number(kw, "eps", 1e-8, what), get_number(kw, "eps_root", 0, what),
        get_dtype(kw, "mu_dtype", nullptr, what), get_bool(kw, "nesterov", false, what));
  }
  if (name == "big_vision.momentum_hp") {
    check_keys(kw, {"momentum", "dtype", "nesterov"}, what);
    return std::make_unique<Trace>(get_number(kw, "momentum", 0.9, what),
                                   get_dtype(kw, "dtype", "bfloat16", what),
                                   get_bool(kw, "nesterov", false, what));
  }
  if (name == "big_vision.sgd") {
    check_keys(kw, {}, what);
    return std::make_unique<Identity>();
  }
  if (name == "scale") {
    check_keys(kw, {"step_size"}, what);
    BV_CHECK(has_value(kw, "step_size"), what, ": scale needs optax.step_size");
    return std::make_unique<Scale>(get_number(kw, "step_size", 0, what));
  }
  fail("unknown optax_name '", name, "' (known: big_vision.scale_by_adafactor, scale_by_adam, ",
       "big_vision.momentum_hp, big_vision.sgd, scale)");
}

const std::vector<std::pair<std::string, std::string>>& transform_docs() {
  static const std::vector<std::pair<std::string, std::string>> docs = {
      {"big_vision.scale_by_adafactor",
       "factored second-moment scaling (optax.min_dim_size_to_factor=32, decay_rate=0.8, "
       "decay_offset=0, beta2_cap=0.999, clipping_threshold, momentum, "
       "dtype_momentum='bfloat16', eps=1e-30)"},
      {"scale_by_adam",
       "Adam's scaling (optax.b1=0.9, b2=0.999, eps=1e-8, eps_root=0, mu_dtype, nesterov=False)"},
      {"big_vision.momentum_hp",
       "momentum with the trace kept in low precision (optax.momentum=0.9, dtype='bfloat16', "
       "nesterov=False)"},
      {"big_vision.sgd", "plain SGD: the update is the gradient (no optax options)"},
      {"scale", "multiplies the gradient by optax.step_size (required)"},
  };
  return docs;
}

}  // namespace bv::optim
