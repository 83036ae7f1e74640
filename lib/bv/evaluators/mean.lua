-- The `mean` evaluator (big_vision's evaluators/mean.py): the mean over the real examples of
-- per-example metrics that predict_fn computes.
--
--   predict_fns.loss = function(params, batch) return {loss = per_example_loss} end
--   evals.val_loss = {type = "mean", pred = "loss", data = {...}, pp = "...", log_steps = 500}
--
-- predict_fn(params, batch) gets the whole batch (`_mask` included) and returns a table of
-- name -> [B] tensor. run() yields each name, sorted (as jax's tree functions order dict
-- keys), with sum(v where _mask) / sum(_mask): padding rows are left out of the sum entirely
-- (big_vision's jnp.where), so even a NaN there doesn't matter. Sums are in doubles.
local evaluators = require "bv.evaluators"

require("bv.config_keys").declare("evaluator:mean", {
  doc = "the mean of per-example metrics the predict function returns",
  include = {"evaluator", "eval_input"}})

local M = {}

local Evaluator = {}
Evaluator.__index = Evaluator

-- cfg: the input pipeline keys of evaluators.input_pipeline.
function M.new(predict_fn, cfg)
  if type(predict_fn) ~= "function" then error("mean: predict_fn must be a function", 2) end
  cfg = evaluators.copy(cfg or {})
  local self = setmetatable({}, Evaluator)
  self.predict_fn = predict_fn
  self.make_iter = evaluators.input_pipeline(cfg, "mean")
  return self
end

local function shape_str(shape)
  return "[" .. table.concat(shape, ", ") .. "]"
end

-- Runs over the whole data set; returns {{name, mean}, ...} sorted by name. ctx.sum (several
-- processes): each rank runs its part of the split and the sums are summed over ranks.
function Evaluator:run(params, ctx)
  local sum = ctx and ctx.sum
  local it <close> = self.make_iter(sum and ctx)
  local names, sums, count = nil, {}, 0
  while true do
    local batch = it:next()
    if not batch then break end
    local mask = batch._mask:totable()
    local out = self.predict_fn(params, batch)
    if type(out) ~= "table" or bv.is_tensor(out) then
      error("mean: predict_fn must return a table of name -> per-example tensor, got "
        .. (bv.is_tensor(out) and "a tensor" or type(out)), 0)
    end
    local keys = {}
    for k, v in pairs(out) do
      if type(k) ~= "string" then
        error("mean: predict_fn returned a non-string key " .. tostring(k), 0)
      end
      local shape = bv.is_tensor(v) and v:shape()
      if not shape or #shape ~= 1 or shape[1] ~= #mask then
        error(string.format("mean: expected per-example metrics of shape [%d], got '%s' %s", #mask,
                            k, shape and shape_str(shape) or ("a " .. type(v))), 0)
      end
      keys[#keys + 1] = k
    end
    table.sort(keys)
    if names == nil then
      names = keys
    elseif table.concat(names, "\0") ~= table.concat(keys, "\0") then
      error(string.format("mean: predict_fn returned {%s} for one batch and {%s} for another",
                          table.concat(names, ", "), table.concat(keys, ", ")), 0)
    end
    for _, k in ipairs(keys) do
      local values, s = out[k]:to("float64"):totable(), 0.0
      for i, real in ipairs(mask) do
        if real then s = s + values[i] end
      end
      sums[k] = (sums[k] or 0.0) + s
    end
    for _, real in ipairs(mask) do
      if real then count = count + 1 end
    end
  end
  if sum then
    -- Every rank must make the same calls: a part without examples cannot say its names.
    if names == nil then error("mean: this process's part of the data set is empty", 0) end
    for _, k in ipairs(names) do sums[k] = sum(sums[k]) end
    count = sum(count)
  end
  local results = {}
  for _, k in ipairs(names or {}) do results[#results + 1] = {k, sums[k] / count} end
  return results
end

return M
