// The training step's native half: forward, loss and backward in one call over accum_steps
// micro-batches, with big_vision's mixup, and the observers of its backward (big_vision's
// train.py update_fn up to the gradients; the optimizer update follows,
// runtime/optim/optimizer.cpp). The losses are in train/losses.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <map>
#include <string>

#include "core/rng.h"
#include "models/model.h"

namespace bv::train {

// big_vision's get_mixup as train.py uses it: a ~ Beta(p, p), a = max(a, 1 - a), and each of
// `images` and `labels` mixed with itself rolled by one along the batch. Draws from `gen`.
void mixup(at::Generator& gen, double p, at::Tensor& images, at::Tensor& labels);

struct StepOptions {
  std::string loss = "sigmoid_xent";  // big_vision's default
  int64_t accum_steps = 1;            // micro-batches; the gradient equals the full batch's
  double mixup_p = 0;                 // > 0: mixup with a ~ Beta(p, p), a = max(a, 1 - a)
  // "" (float32) or "bfloat16": the forward's matmuls and convolutions run in that dtype under
  // libtorch's autocast on the images' device; the loss, the gradients and the parameters stay
  // float32. "float16" is refused: it needs loss scaling, which the step does not do.
  std::string autocast;
  double label_smoothing = 0;  // the prefix-LM loss (lm_loss_and_grads)
};

struct Gradients {
  // The mean over the whole batch: a float32 scalar on the parameters' device, left there (reading
  // it is a host sync; the trainers read it at the steps that log).
  at::Tensor loss;
  std::map<std::string, at::Tensor> grads;  // name -> gradient (params that got one)
};

// Watches a training step's backward from outside the training code: the all-reduce of the
// replicated gradients (runtime/distributed/grad_buckets.h) starts each bucket as soon as the
// backward has produced it. While one is set for the thread (BackwardObserverScope),
// loss_and_grads and lm_loss_and_grads call before_last_backward just before the last
// micro-batch's backward (earlier micro-batches only accumulate), with the parameters and the
// step's loss (the mean over the whole batch), and after_backward with the step's result,
// which it may rewrite (the averaged gradients and loss). When the step fails in between,
// abandon is called instead. Gradient hooks it registers run on autograd's threads: they must
// never call into Lua.
struct BackwardObserver {
  virtual ~BackwardObserver() = default;
  virtual void before_last_backward(const models::Params& params, const at::Tensor& loss) = 0;
  virtual void after_backward(Gradients& out) = 0;
  virtual void abandon() noexcept = 0;
};

BackwardObserver* current_backward_observer();

// Sets the thread's BackwardObserver for its lifetime (and restores the previous one).
class BackwardObserverScope {
 public:
  explicit BackwardObserverScope(BackwardObserver* observer);
  ~BackwardObserverScope();
  BackwardObserverScope(const BackwardObserverScope&) = delete;
  BackwardObserverScope& operator=(const BackwardObserverScope&) = delete;

 private:
  BackwardObserver* previous_;
};

// Forward (train=true), loss and backward; `rng` draws the mixup coefficient. Parameters are
// marked as requiring gradients on first use; their .grad is cleared again before returning.
Gradients loss_and_grads(const models::ModelApi& model, const nlohmann::json& cfg,
                         const models::Params& params, const at::Tensor& images,
                         const at::Tensor& labels, const StepOptions& opts, Rng* rng);

// The prefix-LM step (big_vision's trainers/proj/paligemma/train.py): logits of
// model(image, text[:, :-1], mask_ar[:, :-1]) predict text[:, 1:]; token losses weighted by
// mask_loss[:, 1:] are summed per example and divided by max(Σ weights, 1); the loss is the batch
// mean. text, mask_ar, mask_loss are [B, T].
Gradients lm_loss_and_grads(const models::ModelApi& model, const nlohmann::json& cfg,
                            const models::Params& params, const at::Tensor& image,
                            const at::Tensor& text, const at::Tensor& mask_ar,
                            const at::Tensor& mask_loss, const StepOptions& opts);

}  // namespace bv::train
