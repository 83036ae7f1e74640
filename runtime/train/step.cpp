#include "train/step.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <optional>

#include "core/error.h"
#include "core/tensor_util.h"
#include "device/autocast.h"
#include "train/losses.h"

namespace bv::train {

void mixup(at::Generator& gen, double p, at::Tensor& images, at::Tensor& labels) {
  // a ~ Beta(p, p) as G1 / (G1 + G2) with two Gamma(p) draws. `gen` is a host stream (its
  // state goes into checkpoints as it is on every device): the draw is a host computation on
  // two numbers, not a device sync, and `a` reaches the device's kernels as a scalar argument.
  at::Tensor g = at::_standard_gamma(at::full({2}, p, at::kDouble), gen);
  double a = (g[0] / g.sum()).item<double>();
  a = std::max(a, 1 - a);
  images = a * images + (1 - a) * at::roll(images, {1}, {0});
  labels = a * labels + (1 - a) * at::roll(labels, {1}, {0});
}

namespace {

thread_local BackwardObserver* t_backward_observer = nullptr;

// Calls the observer's abandon when the step does not reach after_backward (an exception).
struct ObserverGuard {
  BackwardObserver* observer = nullptr;
  ~ObserverGuard() {
    if (observer) observer->abandon();
  }
};

}  // namespace

BackwardObserver* current_backward_observer() { return t_backward_observer; }

BackwardObserverScope::BackwardObserverScope(BackwardObserver* observer)
    : previous_(t_backward_observer) {
  t_backward_observer = observer;
}

BackwardObserverScope::~BackwardObserverScope() { t_backward_observer = previous_; }

namespace {

std::optional<at::ScalarType> autocast_dtype(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  // float16's range (max 65504, smallest normal 6e-5) makes small gradients underflow to zero
  // unless the loss is scaled up before the backward and the gradients down after it
  // (torch.amp's GradScaler), which the step does not do. bfloat16 has float32's range.
  BV_CHECK(name != "float16",
           "autocast: \"float16\" needs loss scaling, which bvlua does not do; use "
           "autocast = \"bfloat16\" (float32's range, no scaling needed)");
  BV_CHECK(name.empty() || name == "float32", "autocast: unknown dtype '", name,
           "' (bfloat16 or float32)");
  return std::nullopt;
}

// Forward and backward over accum_steps micro-batches of `batch` rows. forward(start, n) gives
// the logits of rows [start, start + n) (run under autocast when asked); loss(logits, start, n)
// the micro-batch's mean loss. Gradients add up; their mean over micro-batches is the batch's.
template <typename Forward, typename Loss>
Gradients accumulate(const models::Params& params, int64_t batch, const StepOptions& opts,
                     const Forward& forward, const Loss& loss_of) {
  BV_CHECK(opts.accum_steps >= 1, "accum_steps must be at least 1, got ", opts.accum_steps);
  BV_CHECK(batch % opts.accum_steps == 0, "batch size ", batch, " is not divisible by accum_steps ",
           opts.accum_steps);
  std::optional<at::ScalarType> low = autocast_dtype(opts.autocast);
  for (const auto& [name, p] : params) {
    if (!p.requires_grad()) const_cast<at::Tensor&>(p).set_requires_grad(true);
  }
  at::AutoGradMode grad_on(true);  // callers (the Lua bindings) run with gradients off
  BackwardObserver* observer = current_backward_observer();
  ObserverGuard guard;
  Gradients out;
  int64_t micro = batch / opts.accum_steps;
  for (int64_t i = 0; i < opts.accum_steps; ++i) {
    at::Tensor logits;
    {
      std::unique_ptr<AutocastGuard> autocast;
      if (low)
        autocast = std::make_unique<AutocastGuard>(params.begin()->second.device().type(), *low);
      logits = forward(i * micro, micro).to(at::kFloat);
    }
    at::Tensor loss = loss_of(logits, i * micro, micro) / opts.accum_steps;
    out.loss = out.loss.defined() ? out.loss + loss.detach() : loss.detach();
    if (observer && i + 1 == opts.accum_steps) {
      guard.observer = observer;
      observer->before_last_backward(params, out.loss);
    }
    loss.backward();
  }
  for (const auto& [name, p] : params) {
    at::Tensor& g = const_cast<at::Tensor&>(p).mutable_grad();
    if (g.defined()) {
      out.grads[name] = g;
      g = at::Tensor();  // the next step starts from no gradient
    }
  }
  if (observer) {
    guard.observer = nullptr;
    observer->after_backward(out);
  }
  return out;
}

}  // namespace

Gradients loss_and_grads(const models::ModelApi& model, const nlohmann::json& cfg,
                         const models::Params& params, const at::Tensor& images,
                         const at::Tensor& labels, const StepOptions& opts, Rng* rng) {
  BV_CHECK(!params.empty(), "loss_and_grads: no parameters");
  int64_t batch = images.size(0);
  BV_CHECK(labels.size(0) == batch, "the batch has ", batch, " images but ", labels.size(0),
           " labels");
  at::Tensor x = images.to(at::kFloat), y = labels.to(at::kFloat);
  if (opts.mixup_p > 0) {
    BV_CHECK(rng, "mixup needs a random stream");
    mixup(rng->gen, opts.mixup_p, x, y);
  }
  return accumulate(
      params, batch, opts,
      [&](int64_t start, int64_t n) {
        return model.apply(cfg, params, {x.narrow(0, start, n)}, /*train=*/true).out;
      },
      [&](const at::Tensor& logits, int64_t start, int64_t n) {
        return per_example_loss(opts.loss, logits, y.narrow(0, start, n)).mean();
      });
}

Gradients lm_loss_and_grads(const models::ModelApi& model, const nlohmann::json& cfg,
                            const models::Params& params, const at::Tensor& image,
                            const at::Tensor& text, const at::Tensor& mask_ar,
                            const at::Tensor& mask_loss, const StepOptions& opts) {
  BV_CHECK(!params.empty(), "lm_loss_and_grads: no parameters");
  BV_CHECK(text.dim() == 2 && text.size(1) >= 2,
           "lm_loss_and_grads: text must be [batch, length "
           ">= 2] tokens, got ",
           shape_string(text));
  BV_CHECK(mask_ar.sizes() == text.sizes() && mask_loss.sizes() == text.sizes(),
           "lm_loss_and_grads: mask_ar ", shape_string(mask_ar), " and mask_loss ",
           shape_string(mask_loss), " must have text's shape ", shape_string(text));
  BV_CHECK(image.size(0) == text.size(0), "lm_loss_and_grads: ", image.size(0), " images but ",
           text.size(0), " texts");
  int64_t T = text.size(1);
  at::Tensor x = image.to(at::kFloat), inputs = text.narrow(1, 0, T - 1);
  at::Tensor ar = mask_ar.narrow(1, 0, T - 1), targets = text.narrow(1, 1, T - 1);
  at::Tensor weights = mask_loss.narrow(1, 1, T - 1).to(at::kFloat);
  return accumulate(
      params, text.size(0), opts,
      [&](int64_t start, int64_t n) {
        return model
            .apply(cfg, params,
                   {x.narrow(0, start, n), inputs.narrow(0, start, n), ar.narrow(0, start, n)},
                   /*train=*/true)
            .out;
      },
      [&](const at::Tensor& logits, int64_t start, int64_t n) {
        at::Tensor w = weights.narrow(0, start, n);
        at::Tensor nll = token_nll(logits, targets.narrow(0, start, n), opts.label_smoothing);
        return ((nll * w).sum(1) / w.sum(1).clamp_min(1)).mean();
      });
}

}  // namespace bv::train
