#include "models/remat.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "device/autocast.h"
#include "models/model.h"

namespace bv::models {

namespace {

// The backward of a rematerialised layer: inputs are the gradient of y; outputs the gradients
// of x and of the anchor (none).
struct RematBackward : torch::autograd::Node {
  std::function<at::Tensor(const at::Tensor&)> layer;
  at::Tensor x;  // the input, detached: what the forward kept
  bool x_requires_grad = false;
  ParamSource* source = nullptr;  // fsdp: the backward may run on autograd's device thread
  std::optional<c10::ScalarType> autocast;
  c10::DeviceType device = c10::DeviceType::CPU;

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    ParamSourceScope scope(source);
    std::unique_ptr<AutocastGuard> low;
    if (autocast) low = std::make_unique<AutocastGuard>(device, *autocast);
    at::AutoGradMode on(true);
    at::Tensor xi = x.detach().requires_grad_(x_requires_grad);
    at::Tensor y = layer(xi);
    // Gradients reach the parameters' .grad (and fsdp's owners) through this inner backward.
    torch::autograd::backward({y}, {grads[0]});
    at::Tensor gx = x_requires_grad ? xi.grad() : at::Tensor();
    layer = nullptr;  // the graph runs once: free what the closure holds
    x = at::Tensor();
    return {gx, at::Tensor()};
  }
};

// A new autograd node, held as this libtorch holds nodes: by c10::intrusive_ptr in 2.15 (our
// wheel), by std::shared_ptr in 2.11 (the lent GPU machines' torch).
template <typename N>
auto make_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, torch::autograd::Node>) {
    return c10::make_intrusive<N>();
  } else {
    return std::make_shared<N>();
  }
}

// An input that always requires grad, so the node is part of the graph even when x is not
// (the first layer of a model whose input needs no gradient): its parameters still need theirs.
const at::Tensor& anchor() {
  static const at::Tensor a = at::zeros({}, at::kFloat).set_requires_grad(true);
  return a;
}

thread_local int forward_depth = 0;

}  // namespace

bool remat_forward_running() { return forward_depth > 0; }

at::Tensor remat(std::function<at::Tensor(const at::Tensor&)> layer, const at::Tensor& x) {
  if (!at::GradMode::is_enabled()) return layer(x);
  at::Tensor y;
  {
    at::NoGradGuard no_grad;
    struct Depth {
      Depth() { ++forward_depth; }
      ~Depth() { --forward_depth; }
    } depth;
    y = layer(x.detach());
  }
  auto node = make_node<RematBackward>();
  node->x = x.detach();
  node->x_requires_grad = x.requires_grad();
  node->source = current_param_source();
  node->device = x.device().type();
  node->autocast = autocast_dtype(node->device);
  node->layer = std::move(layer);
  node->set_next_edges(torch::autograd::collect_next_edges(x, anchor()));
  torch::autograd::set_history(y, node);
  return y;
}

}  // namespace bv::models
