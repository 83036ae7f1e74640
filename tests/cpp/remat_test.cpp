// models::remat: the layer runs again in the backward, and the gradients (of the input and of
// the parameters it closes over) are those of running it plainly.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <catch2/catch.hpp>

#include "models/remat.h"

namespace {

struct Run {
  at::Tensor loss, gx, gw;
  int calls = 0;
};

Run run(bool remat, bool input_needs_grad) {
  at::manual_seed(0);
  at::Tensor x = at::randn({3, 4}).set_requires_grad(input_needs_grad);
  at::Tensor w = at::randn({4, 4}).set_requires_grad(true);
  Run r;
  auto layer = [w, &r](const at::Tensor& h) {
    ++r.calls;
    return at::tanh(at::matmul(h, w)) + h;
  };
  at::AutoGradMode on(true);
  at::Tensor h = x;
  for (int i = 0; i < 2; ++i) h = remat ? bv::models::remat(layer, h) : layer(h);
  r.loss = h.square().sum();
  r.loss.backward();
  r.gx = input_needs_grad ? x.grad() : at::Tensor();
  r.gw = w.grad();
  return r;
}

}  // namespace

TEST_CASE("remat: same loss and gradients, the layer runs again in the backward", "[remat]") {
  for (bool input_needs_grad : {true, false}) {
    Run plain = run(false, input_needs_grad), re = run(true, input_needs_grad);
    CHECK(plain.calls == 2);
    CHECK(re.calls == 4);  // two forwards, two recomputations
    CHECK(at::allclose(plain.loss, re.loss));
    REQUIRE(re.gw.defined());  // even when the input needs no gradient
    CHECK(at::allclose(plain.gw, re.gw, 1e-5, 1e-6));
    if (input_needs_grad) CHECK(at::allclose(plain.gx, re.gx, 1e-5, 1e-6));
  }
}

TEST_CASE("remat: without gradients the layer just runs", "[remat]") {
  at::NoGradGuard off;
  int calls = 0;
  at::Tensor y = bv::models::remat(
      [&](const at::Tensor& h) {
        ++calls;
        return h * 2;
      },
      at::ones({2}));
  CHECK(calls == 1);
  CHECK(at::equal(y, at::full({2}, 2.0)));
}
