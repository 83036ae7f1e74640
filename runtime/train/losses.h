// big_vision's losses, for the training step (train/step.h) and the evaluators:
// utils.softmax_xent, utils.sigmoid_xent and PaliGemma's token loss.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace bv::train {

// Per example (any leading dimensions, classes last; labels one-hot, multi-hot or soft, of the
// logits' shape): -Σ labels * log_softmax(logits); kl = true adds Σ labels * log(max(labels,
// 1e-8)), the labels' negative entropy, giving the KL divergence.
at::Tensor softmax_xent(const at::Tensor& logits, const at::Tensor& labels, bool kl = false);
// Per example: -Σ [y log σ(l) + (1 - y) log σ(-l)] over the classes.
at::Tensor sigmoid_xent(const at::Tensor& logits, const at::Tensor& labels);
// One of the two by big_vision's name ("softmax_xent", "sigmoid_xent"), per example.
at::Tensor per_example_loss(const std::string& name, const at::Tensor& logits,
                            const at::Tensor& labels);

// big_vision's PaliGemma token loss: -Σ_v target·log_softmax(logits) per position, [B, T], with
// target 1 - s on the true token and s / (V - 1) elsewhere (s = label_smoothing).
at::Tensor token_nll(const at::Tensor& logits, const at::Tensor& targets,
                     double label_smoothing = 0);

}  // namespace bv::train
