// ViT's per-token pre_logits_2d and logits_2d are lazy (models::Output::lazy): the training step,
// which reads Output::out alone, never runs the head on every token, as big_vision's jit drops
// what nothing reads; reading them gives the head applied to each token. The text transformer's
// vocab_logits is lazy the same way. two_towers takes an undefined input as big_vision's None.
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

TEST_CASE("text transformer outputs: vocab_logits is lazy, the table applied to each token",
          "[models][outputs]") {
  using bv::models::text_transformer_api;
  at::manual_seed(0);
  nlohmann::json cfg = {
      {"variant", "mu"}, {"depth", 1}, {"vocab_size", 20}, {"text_len", 5}, {"num_classes", 6}};
  auto params = bv::models::init_params(text_transformer_api(), cfg, 0);
  at::Tensor text = at::randint(20, {3, 5}, at::kLong);
  Output o = text_transformer_api().apply(cfg, params, {text}, false);
  CHECK(names_of(o, true) == std::set<std::string>{"vocab_logits"});
  CHECK(names_of(o, false).count("embedded") == 1);
  at::Tensor vocab = aux(o, "vocab_logits");
  CHECK(vocab.sizes() == at::IntArrayRef({3, 5, 20}));
  CHECK(at::allclose(vocab, at::matmul(aux(o, "transformed"), params["Embed_0/embedding"].t())));
}

TEST_CASE("two towers outputs: an undefined input leaves its tower out", "[models][outputs]") {
  using bv::models::two_towers_api;
  at::manual_seed(0);
  nlohmann::json cfg = {
      {"image", {{"variant", "mu/4"}, {"image_size", 8}, {"depth", 1}}},
      {"text", {{"variant", "mu"}, {"depth", 1}, {"vocab_size", 20}, {"text_len", 5}}},
      {"out_dim", 6},
      {"bias_init", -10}};
  auto params = bv::models::init_params(two_towers_api(), cfg, 0);
  at::Tensor images = at::randn({2, 8, 8, 3});
  at::Tensor text = at::randint(20, {3, 5}, at::kLong);
  Output both = two_towers_api().apply(cfg, params, {images, text}, false);
  CHECK(both.out.sizes() == at::IntArrayRef({2, 3}));
  // The vocabulary logits stay lazy under txt/.
  CHECK(names_of(both, true).count("txt/vocab_logits") == 1);

  for (const std::vector<at::Tensor>& in :
       {std::vector<at::Tensor>{images}, std::vector<at::Tensor>{images, at::Tensor()}}) {
    Output img = two_towers_api().apply(cfg, params, in, false);
    CHECK(at::equal(img.out, aux(both, "zimg")));
    std::set<std::string> names = names_of(img, false);
    CHECK(names.count("zimg") == 1);
    CHECK(names.count("ztxt") == 0);
    CHECK(names.count("txt/normalized") == 0);
    CHECK(names.count("t") == 1);
    CHECK(names.count("b") == 1);
    CHECK(names_of(img, true) == std::set<std::string>{"img/logits_2d"});
  }
  Output txt = two_towers_api().apply(cfg, params, {at::Tensor(), text}, false);
  CHECK(at::equal(txt.out, aux(both, "ztxt")));
  CHECK(names_of(txt, false).count("zimg") == 0);
  CHECK(names_of(txt, false).count("img/normalized") == 0);
  CHECK(names_of(txt, false).count("t/parameter") == 1);

  std::string err;
  try {
    two_towers_api().apply(cfg, params, {at::Tensor(), at::Tensor()}, false);
  } catch (const std::exception& e) {
    err = e.what();
  }
  CHECK(err.find("neither images nor texts") != std::string::npos);
}
