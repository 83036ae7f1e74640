// Rematerialisation of one layer (big_vision's nn.remat with the "nothing_saveable" policy):
// the forward keeps only the layer's input; the backward runs the layer again, with gradients,
// and then backpropagates through it. Activations then cost one tensor per layer, and under fsdp
// (runtime/distributed/fsdp.h) a layer's fetched parameters die with the layer and are fetched
// again for its backward, so no more than a layer's parameters are whole at any time (unless
// fsdp keeps them for the recomputation: FsdpParams's reshard_after_forward = false).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace bv::models {

// y = layer(x), rematerialised when gradients are on. `layer` must own what it uses (capture
// by value): it runs again during the backward, after the caller has returned. It must be
// deterministic (no dropout).
at::Tensor remat(std::function<at::Tensor(const at::Tensor&)> layer, const at::Tensor& x);

// True while remat's first, gradient-free run of a layer is under way on this thread: what the
// layer reads now it reads again when the backward recomputes it.
bool remat_forward_running();

}  // namespace bv::models
