// The optimizers `optax_name` picks, applied to one parameter (leaf) at a time: big_vision's
// scale_by_adafactor, momentum_hp (optax.trace) and sgd, and optax's scale_by_adam and scale.
// Each keeps its per-parameter state as named tensors (optax's field names: mu, nu, v_row,
// v_col, v, ema, trace) so checkpoints can save them, and updates it in place.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace bv::optim {

class LeafTransform {
 public:
  virtual ~LeafTransform() = default;
  // The state of a parameter of `shape` before the first update (float32 zeros, or the dtype an
  // option asks for) on `device` (the meta device: shapes only), as (field, tensor) pairs; empty
  // for stateless optimizers.
  virtual NamedTensors init(const std::vector<int64_t>& shape, c10::Device device) const = 0;
  // The updates of several parameters at once, from their float32 gradients `gs` and states
  // (init()'s fields, on the gradients' device and held by nobody else: the optimizer makes sure
  // of both), which are changed in place. Multi-tensor (at::_foreach_*) and in-place ops in the
  // order reference_update() computes each element, so that the results are the same bit for
  // bit on the CPU. An update returned may be a gradient or a state tensor itself: the caller
  // reads it only. `count`: updates done before this one.
  virtual std::vector<at::Tensor> update(const std::vector<at::Tensor>& gs,
                                         const std::vector<NamedTensors*>& states,
                                         int64_t count) const = 0;
  // The same for one parameter, written plainly: every op makes a new tensor, and the new state
  // replaces the old. What update() is held to (tests/cpp/optim_test.cpp), and the "before" of
  // scripts/bench_optim.lua.
  virtual at::Tensor reference_update(const at::Tensor& g, NamedTensors& state,
                                      int64_t count) const = 0;
  // Whether the update of a parameter of `shape` treats its rows (dim 0) independently, so that
  // updating each row block apart gives the same result (fsdp splits layer stacks so).
  virtual bool rows_independent(const std::vector<int64_t>& /*shape*/) const { return true; }
};

// `name`: "big_vision.scale_by_adafactor", "scale_by_adam", "big_vision.momentum_hp",
// "big_vision.sgd" or "scale"; `kwargs`: config.optax (an object or null). Unknown names and
// keys are errors naming them.
std::unique_ptr<LeafTransform> make_transform(const std::string& name,
                                              const nlohmann::json& kwargs);

// (optax_name, one-line doc) for every name make_transform knows: `?name` in the REPL.
const std::vector<std::pair<std::string, std::string>>& transform_docs();

// Adafactor's factoring rule: {d1, d0} = the axes of the second-largest and largest dims
// (stable order, so among equal sizes the earlier axis is d1), or {-1, -1} when the parameter is
// not factored (fewer than 2 dims, or the second-largest dim below `min_dim_size_to_factor`).
std::pair<int, int> factored_dims(const std::vector<int64_t>& shape,
                                  int64_t min_dim_size_to_factor);

}  // namespace bv::optim
