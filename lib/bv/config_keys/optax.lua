-- Config keys of the optimizers (config.optax per config.optax_name), which the native
-- optimizer reads (runtime/optim/transforms.cpp, refusing keys it does not know).
local config_keys = require "bv.config_keys"

config_keys.declare("optax:big_vision.scale_by_adafactor", {
  doc = "factored second-moment scaling (big_vision's Adafactor)", keys = {
  {"min_dim_size_to_factor", "int", 32, "dims below this are not factored"},
  {"decay_rate", "float", 0.8, "the second moment's decay exponent"},
  {"decay_offset", "int", 0, "steps added before the decay"},
  {"beta2_cap", "float", 0.999, "the second moment's decay is at most this"},
  {"clipping_threshold", "float", nil, "clips updates' RMS to this; None: no clipping"},
  {"momentum", "float", nil, "first-moment decay; None: no momentum"},
  {"dtype_momentum", "string", "bfloat16", "the momentum's dtype"},
  {"eps", "float", 1e-30, "added to squared gradients"},
}})

config_keys.declare("optax:scale_by_adam", {doc = "Adam's scaling", keys = {
  {"b1", "float", 0.9, "first-moment decay"},
  {"b2", "float", 0.999, "second-moment decay"},
  {"eps", "float", 1e-8, "added to the root of the second moment"},
  {"eps_root", "float", 0, "added inside the root"},
  {"mu_dtype", "string", nil, "the first moment's dtype (None: float32)"},
  {"nesterov", "bool", false, "Nesterov momentum"},
}})

config_keys.declare("optax:big_vision.momentum_hp", {
  doc = "momentum with the trace kept in low precision", keys = {
  {"momentum", "float", 0.9, "the trace's decay"},
  {"dtype", "string", "bfloat16", "the trace's dtype"},
  {"nesterov", "bool", false, "Nesterov momentum"},
}})

config_keys.declare("optax:big_vision.sgd", {doc = "plain SGD: the update is the gradient",
                                             keys = {}})

config_keys.declare("optax:scale", {doc = "multiplies the gradient by step_size", keys = {
  {"step_size", "float", nil, "the factor (required)"},
}})
