#include "train/losses.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/tensor_util.h"

namespace bv::train {

namespace {

void check_pair(const at::Tensor& logits, const at::Tensor& labels, const char* loss) {
  BV_CHECK(logits.sizes() == labels.sizes(), loss, ": logits ", shape_string(logits),
           " and labels ", shape_string(labels),
           " differ (labels must be one-hot or multi-hot; "
           "use onehot(num_classes) in the pp)");
}

}  // namespace

at::Tensor softmax_xent(const at::Tensor& logits, const at::Tensor& labels, bool kl) {
  check_pair(logits, labels, "softmax_xent");
  at::Tensor y = labels.to(logits.scalar_type());
  at::Tensor nll = -(y * at::log_softmax(logits, -1)).sum(-1);
  if (kl) nll = nll + (y * y.clamp_min(1e-8).log()).sum(-1);
  return nll;
}

at::Tensor sigmoid_xent(const at::Tensor& logits, const at::Tensor& labels) {
  check_pair(logits, labels, "sigmoid_xent");
  at::Tensor y = labels.to(logits.scalar_type());
  // log σ(l) = -softplus(-l): stable for large |l|.
  at::Tensor log_p = -at::softplus(-logits), log_not_p = -at::softplus(logits);
  return -(y * log_p + (1 - y) * log_not_p).sum(-1);
}

at::Tensor per_example_loss(const std::string& name, const at::Tensor& logits,
                            const at::Tensor& labels) {
  if (name == "softmax_xent") return softmax_xent(logits, labels);
  if (name == "sigmoid_xent") return sigmoid_xent(logits, labels);
  fail("unknown loss '", name, "' (softmax_xent or sigmoid_xent)");
}

at::Tensor token_nll(const at::Tensor& logits, const at::Tensor& targets, double label_smoothing) {
  BV_CHECK(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
               logits.size(1) == targets.size(1),
           "token_nll: logits ", shape_string(logits), " and targets ", shape_string(targets),
           " must be [B, T, V] and [B, T]");
  at::Tensor logp = at::log_softmax(logits.to(at::kFloat), -1);
  at::Tensor picked = logp.gather(-1, targets.to(at::kLong).unsqueeze(-1)).squeeze(-1);
  if (label_smoothing == 0) return -picked;
  // Σ_v target_v·logp_v with target (1 - s) on the true token and s / (V - 1) on the others.
  double s = label_smoothing, off = s / static_cast<double>(logits.size(-1) - 1);
  return -((1 - s) * picked + off * (logp.sum(-1) - picked));
}

}  // namespace bv::train
