// Gemma's attention on CUDA says once which SDPA kernel it runs (a note for bv's log): the
// names of at::_fused_sdp_choice's results, and no note off CUDA (the CPU, the fake device).
#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/notes.h"
#include "device/fake_device.h"
#include "models/model.h"
#include "models/ppp/gemma.h"

namespace {

int64_t code(at::SDPBackend b) { return static_cast<int64_t>(b); }

}  // namespace

TEST_CASE("sdp_backend_name: at::SDPBackend's values by short names", "[attention]") {
  using bv::models::gemma::sdp_backend_name;
  CHECK(sdp_backend_name(code(at::SDPBackend::math)) == "math");
  CHECK(sdp_backend_name(code(at::SDPBackend::flash_attention)) == "flash");
  CHECK(sdp_backend_name(code(at::SDPBackend::efficient_attention)) == "efficient");
  CHECK(sdp_backend_name(code(at::SDPBackend::cudnn_attention)) == "cudnn");
  CHECK(sdp_backend_name(code(at::SDPBackend::overrideable)) == "overrideable");
  CHECK(sdp_backend_name(code(at::SDPBackend::error)) == "none");
  CHECK(sdp_backend_name(99) == "unknown (99)");
}

TEST_CASE("notes: taken once, in the order posted", "[attention]") {
  bv::take_notes();  // whatever an earlier test left
  bv::post_note("a");
  bv::post_note("b");
  CHECK(bv::take_notes() == std::vector<std::string>{"a", "b"});
  CHECK(bv::take_notes().empty());
}

TEST_CASE("gemma attention posts no SDPA note off CUDA", "[attention]") {
  nlohmann::json cfg = {{"width", 16},       {"depth", 1},    {"mlp_dim", 32},   {"num_heads", 4},
                        {"num_kv_heads", 2}, {"head_dim", 4}, {"vocab_size", 11}};
  const bv::models::ModelApi& gemma = bv::models::gemma_api();
  bv::models::Params params = bv::models::init_params(gemma, cfg, 0);
  at::Tensor tokens = at::arange(6, at::kLong).view({2, 3});
  bv::take_notes();
  at::Tensor cpu = gemma.apply(cfg, params, {tokens}, false).out;
  // The fake device runs SDPA (the path CUDA takes), still with no note.
  at::Device fake = bv::enable_fake_device();
  bv::models::Params on_fake;
  for (const auto& [name, t] : params) on_fake[name] = t.to(fake);
  at::Tensor dev = gemma.apply(cfg, on_fake, {tokens.to(fake)}, false).out;
  CHECK(at::allclose(dev.cpu(), cpu, 1e-4, 1e-5));
  CHECK(bv::take_notes().empty());
}
