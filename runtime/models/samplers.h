// Token samplers for decoding, by big_vision's names (predict_fns.py's paligemma_sampler.*):
//   "greedy", "temperature(t)" / "temperature(t=0.7)", "nucleus(p)" / "nucleus(p=0.9, t=1.0)".
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>

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
// defined, is a list of token ids [K] never to be sampled.
std::pair<at::Tensor, at::Tensor> sample(const at::Tensor& logits, const Sampler& sampler,
                                         at::Generator gen, const at::Tensor& tok_mask = {});

}  // namespace bv::models
