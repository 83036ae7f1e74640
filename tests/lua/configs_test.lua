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

T.run()
