// Token samplers for decoding, by big_vision's names (predict_fns.py's paligemma_sampler.*):
//   "greedy", "temperature(t)" / "temperature(t=0.7)", "nucleus(p)" / "nucleus(p=0.9, t=1.0)".
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

#include "core/rng.h"

namespace bv::models {

struct Sampler {
  std::string kind = "greedy";  // greedy, temperature or nucleus
  double t = 1.0;               // temperature (temperature, nucleus)
  double p = 1.0;               // nucleus: keep the most likely tokens up to this mass
};

// A bv::Error names the spec when it is not one of the forms above.
Sampler parse_sampler(const std::string& spec);

// logits [B, V] -> tokens [B] (int64) and their log-probabilities [B] under the logits as given
// (before tok_mask, as big_vision: a masked token can still shape the score). tok_mask, when
// defined, is a list of token ids [K] never to be sampled (on any device).
// Draws come from `rng`: on the CPU from its generator itself; on a device (whose kernels take
// only a generator of their own kind) from a device generator seeded with rng.next_u64(), so
// that rng's host state, which checkpoints save, still decides every draw. Greedy draws nothing.
std::pair<at::Tensor, at::Tensor> sample(const at::Tensor& logits, const Sampler& sampler, Rng& rng,
                                         const at::Tensor& tok_mask = {});

}  // namespace bv::models
