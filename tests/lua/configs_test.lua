-- Every runnable config resolves, its model builds and its optimizer accepts its settings (no
-- data needed): a typo in a config fails here, not an hour into a run.
local T = require "bv.testing"
local config = require "bv.config"
local json = require "bv.json"

local CONFIGS = {"configs/bit_lines.lua", "configs/bit_lines.lua:quick", "configs/vit_lines.lua",
                 "configs/vit_lines.lua:quick", "configs/vit_i1k.lua", "configs/vit_i1k.lua:aug=strong2"}

for _, spec in ipairs(CONFIGS) do
  T.test(spec, function()
    local c = config.load(spec)
    config.validate(c)
    local model_cfg = {}
    for k, v in pairs(c.model) do model_cfg[k] = v end
    model_cfg.num_classes = c.num_classes
    local model = bv.models.build(c.model_name, model_cfg)
    T.truthy(model:param_count() > 0, "parameters")
    local ntrain = spec:find("i1k") and 1281167 or 10000  -- ImageNet's train split, or lines'
    local total = bv.optim.steps("total", json.encode(c), ntrain, c.input.batch_size, 0)
    T.truthy(total > 0, "total steps")
    local opt = bv.optim.new(json.encode(c), model:param_shapes(),
                             {total_steps = total, batch_size = c.input.batch_size, data_size = ntrain})
    T.eq(opt:count(), 0)
    for _, spec_pp in ipairs({c.input.pp, c.evals.val.pp}) do
      T.eq(type(bv.pp.build(spec_pp)), "function")  -- every op exists and binds its arguments
    end
  end)
end

-- The PaliGemma-3B config (no data or tokenizer needed to resolve it): its model is the
-- published size, which the memory note in the config is computed from, and its fsdp strategy
-- spreads the optimizer state evenly over 2 ranks. (Whole tensors are the unit: from 4 ranks on,
-- the scanned 4.5 GiB llm/layers/mlp/gating_einsum alone exceeds a fair share; measured at 8
-- ranks: 0.36 .. 4.5 GiB per rank against an ideal 1.36.)
T.test("configs/paligemma.lua", function()
  local c = config.load("configs/paligemma.lua")
  config.validate(c)
  T.eq(c.optax_name, "big_vision.scale_by_adafactor")
  local model = bv.models.build(c.model_name, c.model)
  T.eq(model:param_count(), 2923335408)
  local sharding = require "bv.sharding"
  local shard = sharding.new(c, nil)
  shard.world = 2  -- only planning: no process group needed
  local owners = shard:plan(model:param_shapes(), sharding.frozen_fn(c))
  local bytes = {}
  for _, p in ipairs(model:param_shapes()) do
    local r = owners[p.name]
    if r then
      local n = 4
      for _, d in ipairs(p.shape) do n = n * d end
      bytes[r] = (bytes[r] or 0) + n
    end
  end
  local lo, hi = math.huge, 0
  for r = 0, 1 do lo, hi = math.min(lo, bytes[r] or 0), math.max(hi, bytes[r] or 0) end
  T.truthy(lo > 0.95 * hi, string.format("owners unbalanced: %d .. %d bytes", lo, hi))
end)

T.run()
