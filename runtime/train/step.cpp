#include "train/step.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>

#include "core/compat.h"
#include "core/error.h"
#include "core/tensor_util.h"

namespace bv::train {

namespace {

void check_pair(const at::Tensor& logits, const at::Tensor& labels, const char* loss) {
  BV_CHECK(logits.sizes() == labels.sizes(), loss, ": logits ", shape_string(logits),
           " and labels ", shape_string(labels), " differ (labels must be one-hot or multi-hot; "
           "use onehot(num_classes) in the pp)");
}

}  // namespace

at::Tensor softmax_xent(const at::Tensor& logits, const at::Tensor& labels) {
  return per_example_loss("softmax_xent", logits, labels).mean();
}

at::Tensor sigmoid_xent(const at::Tensor& logits, const at::Tensor& labels) {
  return per_example_loss("sigmoid_xent", logits, labels).mean();
}

at::Tensor per_example_loss(const std::string& name, const at::Tensor& logits,
                            const at::Tensor& labels) {
  at::Tensor y = labels.to(logits.scalar_type());
  if (name == "softmax_xent") {
    check_pair(logits, labels, "softmax_xent");
    return -(y * at::log_softmax(logits, -1)).sum(-1);
  }
  if (name == "sigmoid_xent") {
    check_pair(logits, labels, "sigmoid_xent");
    // log σ(l) = -softplus(-l): stable for large |l|.
    at::Tensor log_p = -at::softplus(-logits), log_not_p = -at::softplus(logits);
    return -(y * log_p + (1 - y) * log_not_p).sum(-1);
  }
  fail("unknown loss '", name, "' (softmax_xent or sigmoid_xent)");
}

Gradients loss_and_grads(const models::ModelApi& model, const nlohmann::json& cfg,
                         const models::Params& params, const at::Tensor& images,
                         const at::Tensor& labels, const StepOptions& opts, Rng* rng) {
  BV_CHECK(opts.accum_steps >= 1, "accum_steps must be at least 1, got ", opts.accum_steps);
  int64_t batch = images.size(0);
  BV_CHECK(labels.size(0) == batch, "the batch has ", batch, " images but ", labels.size(0),
           " labels");
  BV_CHECK(batch % opts.accum_steps == 0, "batch size ", batch, " is not divisible by accum_steps ",
           opts.accum_steps);
  std::optional<at::ScalarType> low;
  if (opts.autocast == "bfloat16") low = at::kBFloat16;
  else if (opts.autocast == "float16") low = at::kHalf;
  else BV_CHECK(opts.autocast.empty() || opts.autocast == "float32", "autocast: unknown dtype '",
                opts.autocast, "' (bfloat16, float16 or float32)");
  at::Tensor x = images.to(at::kFloat), y = labels.to(at::kFloat);
  if (opts.mixup_p > 0) {
    BV_CHECK(rng, "mixup needs a random stream");
    // a ~ Beta(p, p) as G1 / (G1 + G2) with two Gamma(p) draws; mixing with the batch rolled by one.
    at::Tensor g = at::_standard_gamma(at::full({2}, opts.mixup_p, at::kDouble), rng->gen);
    double a = (g[0] / g.sum()).item<double>();
    a = std::max(a, 1 - a);
    x = a * x + (1 - a) * at::roll(x, {1}, {0});
    y = a * y + (1 - a) * at::roll(y, {1}, {0});
  }
  for (const auto& [name, p] : params) {
    if (!p.requires_grad()) const_cast<at::Tensor&>(p).set_requires_grad(true);
  }
  at::AutoGradMode grad_on(true);  // callers (the Lua bindings) run with gradients off
  Gradients out;
  int64_t micro = batch / opts.accum_steps;
  for (int64_t i = 0; i < opts.accum_steps; ++i) {
    at::Tensor xi = x.narrow(0, i * micro, micro), yi = y.narrow(0, i * micro, micro);
    at::Tensor logits;
    {
      std::unique_ptr<compat::AutocastGuard> autocast;
      if (low) autocast = std::make_unique<compat::AutocastGuard>(xi.device().type(), *low);
      logits = model.apply(cfg, params, {xi}, /*train=*/true).out.to(at::kFloat);
    }
    at::Tensor loss = per_example_loss(opts.loss, logits, yi).mean() / opts.accum_steps;
    loss.backward();  // gradients add up across micro-batches: their mean is the full batch's
    out.loss += loss.item<double>();
  }
  for (const auto& [name, p] : params) {
    at::Tensor& g = const_cast<at::Tensor&>(p).mutable_grad();
    if (g.defined()) {
      out.grads[name] = g;
      g = at::Tensor();  // the next step starts from no gradient
    }
  }
  return out;
}

}  // namespace bv::train
