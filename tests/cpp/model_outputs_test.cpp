// ViT's per-token pre_logits_2d and logits_2d are lazy (models::Output::lazy): the training step,
// which reads Output::out alone, never runs the head on every token, as big_vision's jit drops
// what nothing reads; reading them gives the head applied to each token.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>
#include <string>

#include "models/model.h"

namespace {

using bv::models::Output;

std::set<std::string> names_of(const Output& o, bool lazy) {
  std::set<std::string> out;
  if (lazy) {
    for (const auto& [name, f] : o.lazy) out.insert(name);
  } else {
    for (const auto& [name, t] : o.aux) out.insert(name);
  }
  return out;
}

at::Tensor aux(const Output& o, const std::string& name) {
  for (const auto& [n, t] : o.aux) {
    if (n == name) return t;
  }
  for (const auto& [n, f] : o.lazy) {
    if (n == name) return f();
  }
  FAIL("no output " << name);
  return {};
}

}  // namespace

TEST_CASE("vit outputs: the per-token head is lazy, the grid of pool_type none is not",
          "[models][outputs]") {
  using bv::models::vit_api;
  at::manual_seed(0);
  at::Tensor x = at::randn({2, 8, 8, 3});
  for (bool rep : {false, true}) {
    nlohmann::json cfg = {{"variant", "mu/4"},     {"depth", 1},      {"image_size", 8},
                          {"num_classes", 3},      {"rep_size", rep}, {"pool_type", "gap"},
                          {"head_zeroinit", false}};
    auto params = bv::models::init_params(vit_api(), cfg, 0);
    Output o = vit_api().apply(cfg, params, {x}, false);
    std::set<std::string> lazy = names_of(o, true), eager = names_of(o, false);
    CHECK(lazy.count("logits_2d") == 1);
    CHECK(eager.count("logits_2d") == 0);
    // Without rep_size, pre_logits_2d is the encoded tokens themselves: eager and free.
    CHECK(lazy.count("pre_logits_2d") == (rep ? 1u : 0u));
    CHECK(eager.count("pre_logits_2d") == (rep ? 0u : 1u));
    at::Tensor pre2d = aux(o, "pre_logits_2d"), logits2d = aux(o, "logits_2d");
    CHECK(logits2d.sizes() == at::IntArrayRef({2, 2, 2, 3}));
    at::Tensor want = at::matmul(pre2d, params["head/kernel"]) + params["head/bias"];
    CHECK(at::allclose(logits2d, want, 1e-5, 1e-6));
    // The mean of the encoded tokens is what the head reads (gap): pre_logits, before rep_size.
    at::Tensor encoded = aux(o, "encoded");
    CHECK(at::equal(aux(o, "head_input"), encoded.mean(1)));

    cfg["pool_type"] = "none";
    Output none = vit_api().apply(cfg, params, {x}, false);
    CHECK(none.lazy.empty());
    CHECK(at::equal(aux(none, "logits_2d"), none.out.reshape({2, 2, 2, 3})));
  }
}
