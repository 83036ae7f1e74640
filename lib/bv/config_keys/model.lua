-- Config keys of the models (config.model per config.model_name): each native model declares its
-- keys once, in its C++ file (ModelApi::keys, runtime/models/model.h), and its parser refuses any
-- other. This file declares a bv.config_keys scope "model:NAME" per model from that list.
local config_keys = require "bv.config_keys"
local json = require "bv.json"
local literal = require "bv.literal"
local models = require "bv.models"

for _, name in ipairs(models.names()) do
  local native = models.config_keys(name)
  local defaults = {}
  for _, k in ipairs(native) do defaults[k.name] = json.decode(k.default) end
  local keys = {}
  for i, k in ipairs(native) do
    local default = defaults[k.name]
    if default == literal.null then default = nil end
    local decl = {k.name, k.type, default, k.doc}
    if k.model_key then
      -- A part's options: the scope of the model that the sibling key model_key names.
      local model_key, fallback = k.model_key, defaults[k.model_key]
      decl.scope = function(_, m)
        local model = type(m) == "table" and m[model_key] or nil
        return "model:" .. (type(model) == "string" and model or fallback)
      end
    end
    keys[i] = decl
  end
  -- The doc's summary: what follows the signature, as in "vit(variant='B/16', ...): ViT".
  local doc = models.doc(name)
  config_keys.declare("model:" .. name, {doc = doc:match("%): (.*)$") or doc, keys = keys})
end
