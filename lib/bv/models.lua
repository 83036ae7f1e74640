-- bv.models: models by big_vision's names (runtime/models/<name>.cpp).
--
--   local m = bv.models.build("vit", {variant = "B/16", num_classes = 1000})
--   m:param_shapes()              -- {{name=, shape=, dtype=}, ...} sorted, nothing allocated
--   local params = m:init(0)      -- name -> tensor, big_vision's names and shapes
--   local logits, out = m:apply(params, images, {train = false})  -- images: NHWC float
local json = require "bv.json"

local M = {}

local Model = {}
Model.__index = Model

function M.build(name, cfg)
  if type(name) ~= "string" then error("models.build: expected a model name", 2) end
  cfg = cfg or {}
  local text = json.encode(cfg, {what = "model config"})
  local model = setmetatable({name = name, cfg = cfg, cfg_json = text}, Model)
  model.specs = bv._models.param_specs(name, text)  -- validates the config now
  return model
end

function M.names() return bv._models.names() end

function M.doc(name) return bv._models.doc(name) end

-- Every parameter's name, shape and dtype, sorted by name (no memory is allocated).
function Model:param_shapes() return self.specs end

-- The number of parameters (elements), from the shapes.
function Model:param_count()
  local total = 0
  for _, s in ipairs(self.specs) do
    local n = 1
    for _, d in ipairs(s.shape) do n = n * d end
    total = total + n
  end
  return total
end

function Model:init(seed)
  return bv._models.init(self.name, self.cfg_json, seed or 0)
end

-- m:apply(params, input... [, {train = bool}]) -> output, table of intermediate outputs
function Model:apply(params, ...)
  local args = table.pack(...)
  local opts = {}
  if args.n > 0 and type(args[args.n]) == "table" and not bv.is_tensor(args[args.n]) then
    opts = args[args.n]
    args.n = args.n - 1
  end
  return bv._models.apply(self.name, self.cfg_json, params, opts.train or false,
                          table.unpack(args, 1, args.n))
end

return M
