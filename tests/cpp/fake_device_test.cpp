// The device test on the fake device (runtime/device/fake_device.h): ViT, BiT, Adafactor
// and PaliGemma with every parameter and batch on a device that is not the CPU.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

#include "device/fake_device.h"
#include "models/model.h"
#include "models/ppp/gemma.h"
#include "models/proj/paligemma/paligemma.h"
#include "optim/optimizer.h"
#include "train/step.h"

namespace {

at::Device fake_device() { return bv::enable_fake_device(); }

// The same numbers up to float32 rounding: the fallback runs the CPU's kernels, but on copies
// whose layout (and so summation order) may differ from a plain CPU run's.
bool close(const at::Tensor& got, const at::Tensor& want) {
  double err = (got.cpu() - want).abs().max().item<double>();
  return err <= 1e-5 * want.abs().max().item<double>() + 1e-6;
}

}  // namespace

TEST_CASE("fake device: tensors live there, compute as on the CPU, refuse a CPU tensor",
          "[device]") {
  at::Tensor a = at::arange(6, at::kFloat).reshape({2, 3});
  at::Tensor fa = a.to(fake_device());
  CHECK(fa.device() == fake_device());
  at::Tensor y = (fa * 2 + 1).sum(1);
  CHECK(y.device() == fake_device());
  CHECK(y.cpu().equal((a * 2 + 1).sum(1)));
  CHECK(fa.transpose(0, 1).contiguous().cpu().equal(a.t().contiguous()));
  CHECK(fa.sum().item<float>() == 15);
  // libtorch's own check or ours, depending on the op: either way it names the CPU.
  CHECK_THROWS_WITH(fa + at::ones({2, 3}), Catch::Contains("cpu", Catch::CaseSensitive::No));
  CHECK_THROWS_WITH(at::matmul(fa, at::ones({3, 2})),
                    Catch::Contains("cpu", Catch::CaseSensitive::No));
}

TEST_CASE("fake device: ViT and BiT training steps with everything there match the CPU's",
          "[device]") {
  auto [api, cfg] = GENERATE(table<const char*, nlohmann::json>({
      {"vit",
       {{"variant", "mu/4"}, {"num_classes", 3}, {"image_size", {8, 8}}, {"head_zeroinit", false}}},
      {"vit",
       {{"variant", "mu/4"},
        {"num_classes", 3},
        {"posemb", "sincos2d"},
        {"pool_type", "map"},
        {"scan", true},
        {"head_zeroinit", false}}},
      {"bit", {{"depth", {1}}, {"width", 0.5}, {"num_classes", 3}}},
  }));
  INFO(api << " " << cfg.dump());
  const bv::models::ModelApi& vit = *bv::models::find_model(api);
  bv::models::Params cpu = bv::models::init_params(vit, cfg, 0), dev;
  for (const auto& [name, t] : cpu) dev[name] = t.to(fake_device());
  at::Tensor x = at::randn({4, 8, 8, 3}), y = at::eye(3).index({at::tensor({0, 1, 2, 0})});
  bv::train::StepOptions opts;
  opts.loss = "softmax_xent";
  auto want = bv::train::loss_and_grads(vit, cfg, cpu, x, y, opts, nullptr);
  auto got = bv::train::loss_and_grads(vit, cfg, dev, x.to(fake_device()), y.to(fake_device()),
                                       opts, nullptr);
  CHECK(got.loss.device() == fake_device());
  CHECK(got.loss.cpu().item<double>() == Approx(want.loss.item<double>()).epsilon(1e-6));
  REQUIRE(got.grads.size() == want.grads.size());
  for (const auto& [name, g] : want.grads) {
    INFO(name << ": largest difference " << (got.grads[name].cpu() - g).abs().max().item<double>()
              << ", largest value " << g.abs().max().item<double>());
    CHECK(got.grads[name].device() == fake_device());
    CHECK(close(got.grads[name], g));
  }
  // A batch left on the CPU is caught.
  CHECK_THROWS_WITH(bv::train::loss_and_grads(vit, cfg, dev, x, y, opts, nullptr),
                    Catch::Contains("cpu", Catch::CaseSensitive::No));
}

TEST_CASE("fake device: big_vision's Adafactor updates parameters and keeps its state there",
          "[device]") {
  const bv::models::ModelApi& vit = bv::models::vit_api();
  nlohmann::json cfg = {{"variant", "mu/4"}, {"num_classes", 3}, {"image_size", {8, 8}}};
  bv::models::Params cpu = bv::models::init_params(vit, cfg, 0), dev, cpu_grads, dev_grads;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& [name, t] : cpu) {
    dev[name] = t.to(fake_device());
    cpu_grads[name] = at::randn(t.sizes());
    dev_grads[name] = cpu_grads[name].to(fake_device());
    shapes.push_back({name, t.sizes().vec()});
  }
  bv::optim::ScheduleContext ctx;
  ctx.total_steps = 10;
  ctx.batch_size = 1;
  nlohmann::json config = {{"optax_name", "big_vision.scale_by_adafactor"},
                           {"lr", 0.01},
                           {"wd", 0.001},
                           {"grad_clip_norm", 1.0},
                           {"schedule", {{"decay_type", "cosine"}, {"warmup_steps", 2}}}};
  bv::optim::Optimizer on_cpu(config, shapes, ctx), on_dev(config, shapes, ctx);
  for (int step = 0; step < 3; ++step) {
    auto want = on_cpu.update(cpu, cpu_grads, true);
    auto got = on_dev.update(dev, dev_grads, true);
    CHECK(got.l2_grads == Approx(want.l2_grads).epsilon(1e-6));
    CHECK(got.l2_updates == Approx(want.l2_updates).epsilon(1e-6));
  }
  for (const auto& [name, t] : cpu) {
    INFO(name);
    CHECK(dev[name].device() == fake_device());
    CHECK(close(dev[name], t));
  }
  for (const auto& [name, t] : on_dev.state()) {
    INFO(name);
    if (t.dim() > 0) CHECK(t.device() == fake_device());
  }
}

TEST_CASE("fake device: PaliGemma's prefix-LM step and KV-cache decoding match the CPU's",
          "[device]") {
  const bv::models::ModelApi& pg = bv::models::paligemma_api();
  nlohmann::json cfg = {{"img", {{"variant", "mu/4"}, {"image_size", {8, 8}}}},
                        {"llm",
                         {{"width", 32},
                          {"depth", 2},
                          {"mlp_dim", 48},
                          {"num_heads", 4},
                          {"num_kv_heads", 1},
                          {"head_dim", 8},
                          {"vocab_size", 20}}}};
  bv::models::Params cpu = bv::models::init_params(pg, cfg, 0), dev;
  for (auto& [name, t] : cpu) {
    t = at::randn(t.sizes()) * 0.3;
    dev[name] = t.to(fake_device());
  }
  at::Tensor image = at::randn({2, 8, 8, 3});
  at::Tensor text = at::tensor({2, 5, 6, 7, 1, 0, 2, 9, 3, 1, 0, 0}, at::kLong).view({2, 6});
  at::Tensor mask_ar = at::tensor({0, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, at::kLong).view({2, 6});
  at::Tensor mask_loss = at::tensor({0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0}, at::kLong).view({2, 6});
  auto d = [](const at::Tensor& t) { return t.to(fake_device()); };
  bv::train::StepOptions opts;
  auto want = bv::train::lm_loss_and_grads(pg, cfg, cpu, image, text, mask_ar, mask_loss, opts);
  auto got =
      bv::train::lm_loss_and_grads(pg, cfg, dev, d(image), d(text), d(mask_ar), d(mask_loss), opts);
  CHECK(got.loss.device() == fake_device());
  CHECK(got.loss.cpu().item<double>() == Approx(want.loss.item<double>()).epsilon(1e-5));
  for (const auto& [name, g] : want.grads) {
    INFO(name);
    CHECK(got.grads[name].device() == fake_device());
    CHECK(close(got.grads[name], g));
  }

  // Decoding: prefill the prompt (the first four tokens; the second row's last one is padding),
  // then two steps with the cache.
  at::Tensor prompt = text.narrow(1, 0, 4), ar = mask_ar.narrow(1, 0, 4);
  at::Tensor input_mask = at::tensor({1, 1, 1, 1, 1, 1, 1, 0}, at::kLong).view({2, 4});
  bv::models::gemma::Cache cache_cpu, cache_dev;
  at::Tensor l_cpu =
      bv::models::paligemma::prefill(cfg, cpu, image, prompt, ar, input_mask, 4, &cache_cpu);
  at::Tensor l_dev = bv::models::paligemma::prefill(cfg, dev, d(image), d(prompt), d(ar),
                                                    d(input_mask), 4, &cache_dev);
  CHECK(l_dev.device() == fake_device());
  CHECK(close(l_dev, l_cpu));
  for (int step = 0; step < 2; ++step) {
    at::Tensor next = l_cpu.argmax(-1);
    l_cpu = bv::models::paligemma::extend(cfg, cpu, next, &cache_cpu);
    l_dev = bv::models::paligemma::extend(cfg, dev, d(next), &cache_dev);
    CHECK(l_dev.device() == fake_device());
    CHECK(close(l_dev, l_cpu));
  }
  for (const at::Tensor& k : cache_dev.k) CHECK(k.device() == fake_device());
}
