#include "models/samplers.h"

#include <ATen/ATen.h>

#include <cctype>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace bv::models {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

double number(const std::string& text, const std::string& spec) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  BV_CHECK(!text.empty() && end && *end == '\0', "sampler '", spec, "': '", text,
           "' is not a number");
  return v;
}

// The generator a draw on `device` takes: on the CPU the host stream's own (unchanged since
// samplers were written: the same seed gives the same tokens); elsewhere one of the device's
// kind (CUDA's kernels reject a CPU generator), seeded from the host stream's next number, so
// the host state decides the draws and a resumed run draws what the first would have.
at::Generator draw_generator(Rng& rng, const at::Device& device) {
  if (device.is_cpu()) return rng.gen;
  // A copy of the device's default generator (its kind, its device), which is left untouched.
  at::Generator base = at::globalContext().defaultGenerator(device);
  at::Generator gen;
  {
    std::lock_guard<std::mutex> lock(base.mutex());
    gen = base.clone();
  }
  gen.set_current_seed(rng.next_u64());
  return gen;
}

// jax.random.categorical: one draw per row from softmax(logits).
at::Tensor categorical(const at::Tensor& logits, Rng& rng) {
  at::Generator gen = draw_generator(rng, logits.device());
  return at::multinomial(at::softmax(logits.to(at::kFloat), -1), 1, false, gen).squeeze(-1);
}

}  // namespace

Sampler parse_sampler(const std::string& spec) {
  Sampler s;
  std::string text = trim(spec);
  size_t open = text.find('(');
  s.kind = trim(text.substr(0, open));
  std::vector<std::string> positional;
  std::vector<std::pair<std::string, std::string>> named;
  if (open != std::string::npos) {
    BV_CHECK(text.back() == ')', "sampler '", spec, "': missing ')'");
    std::string args = text.substr(open + 1, text.size() - open - 2);
    size_t start = 0;
    while (start <= args.size()) {
      size_t comma = args.find(',', start);
      std::string arg =
          trim(args.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (!arg.empty()) {
        size_t eq = arg.find('=');
        if (eq == std::string::npos) {
          BV_CHECK(named.empty(), "sampler '", spec, "': a positional argument after a named one");
          positional.push_back(arg);
        } else {
          named.emplace_back(trim(arg.substr(0, eq)), trim(arg.substr(eq + 1)));
        }
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  // Parameter names in big_vision's order, for positional arguments.
  std::vector<std::string> params;
  if (s.kind == "greedy") params = {};
  else if (s.kind == "temperature") params = {"t"};
  else if (s.kind == "nucleus") params = {"p", "t"};
  else fail("unknown sampler '", spec, "' (greedy, temperature(t), nucleus(p, t=1.0))");
  BV_CHECK(positional.size() <= params.size(), "sampler '", spec, "': too many arguments");
  auto set = [&](const std::string& name, const std::string& value) {
    if (name == "t") s.t = number(value, spec);
    else if (name == "p") s.p = number(value, spec);
  };
  for (size_t i = 0; i < positional.size(); ++i) set(params[i], positional[i]);
  for (const auto& [name, value] : named) {
    bool known = false;
    for (const auto& p : params) known = known || p == name;
    BV_CHECK(known, "sampler '", spec, "': unknown argument '", name, "'");
    set(name, value);
  }
  if (s.kind == "temperature") {
    BV_CHECK(!positional.empty() || !named.empty(), "sampler '", spec, "': temperature needs t");
  }
  if (s.kind == "nucleus") {
    bool has_p = !positional.empty();
    for (const auto& [name, value] : named) has_p = has_p || name == "p";
    BV_CHECK(has_p, "sampler '", spec, "': nucleus needs p");
  }
  BV_CHECK(s.t > 0, "sampler '", spec, "': the temperature must be > 0");
  return s;
}

std::pair<at::Tensor, at::Tensor> sample(const at::Tensor& logits, const Sampler& sampler, Rng& rng,
                                         const at::Tensor& tok_mask) {
  BV_CHECK(logits.dim() == 2, "sample: logits must be [batch, vocab], got [", logits.sizes(), "]");
  at::Tensor masked = logits.to(at::kFloat);
  if (tok_mask.defined() && tok_mask.numel() > 0) {
    // The ids may come from the host (a pp's list) while the logits are on a device.
    masked = masked.index_fill(-1, tok_mask.to(masked.device(), at::kLong).view({-1}),
                               -std::numeric_limits<float>::infinity());
  }
  at::Tensor tokens;
  if (sampler.kind == "greedy") {
    tokens = masked.argmax(-1);
  } else if (sampler.kind == "temperature") {
    tokens = categorical(masked / sampler.t, rng);
  } else {  // nucleus
    at::Tensor scaled = masked / sampler.t;
    at::Tensor sorted = std::get<0>(scaled.sort(-1, /*descending=*/true));
    at::Tensor cum = at::softmax(sorted, -1).cumsum(-1);
    at::Tensor cutoff = (cum < sampler.p).sum(-1, /*keepdim=*/true).clamp_max(sorted.size(-1) - 1);
    at::Tensor cutoff_logit = sorted.gather(-1, cutoff);
    tokens =
        categorical(at::where(scaled < cutoff_logit, at::full_like(scaled, -1e7), scaled), rng);
  }
  at::Tensor logp = at::log_softmax(logits.to(at::kFloat), -1).gather(-1, tokens.unsqueeze(-1));
  return {tokens, logp.squeeze(-1)};
}

}  // namespace bv::models
