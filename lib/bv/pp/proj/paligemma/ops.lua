-- PaliGemma's pp ops (big_vision's pp/proj/paligemma/ops.py): tolen, tok, masked_concat. Token
-- ids are int32 tensors; tokenizers are bv.text's (cached), the length helpers ops_text's.
local pp = require "bv.pp"
local ops_text = require "bv.pp.ops_text"

local register = pp.register
local truncate, pad_to, tolen = ops_text.truncate, ops_text.pad_to, ops_text.tolen

local function as_1d(x, op)
  if type(x) == "table" then x = bv.tensor(x) end
  if not bv.is_tensor(x) or x:dim() ~= 1 then
    error(string.format("%s: expected a 1-D tensor of tokens, got %s", op,
                        bv.is_tensor(x) and (x:dim() .. "-D tensor") or type(x)), 0)
  end
  return x
end

-- The pad value stored under pad_key: a number, or the first element of a 1-D tensor (a
-- previous tokenization's output).
local function pad_from(v, key)
  if type(v) == "number" then return v end
  if bv.is_tensor(v) then
    if v:dim() == 0 then return v:item() end
    if v:dim() == 1 and v:size(1) > 0 then return v[1]:item() end
  end
  error(string.format("tolen: pad_key '%s' holds no usable pad value", key), 0)
end

register("tolen", pp.inkeyoutkey(function(a)
  local length, sticky, pad_value, pad_key = a.length, a.sticky_end, a.pad_value, a.pad_key
  if length and (math.type(length) ~= "integer" or length < 0) then
    error("tolen: length must be a non-negative integer, got " .. tostring(length), 0)
  end
  return function(x, rng, data)
    if not length or length == 0 then return x end
    x = as_1d(x, "tolen")
    local value = pad_value
    if pad_key then
      if data[pad_key] == nil then pp.missing_key(data, pad_key) end
      value = pad_from(data[pad_key], pad_key)
    end
    if value == nil then error("tolen: needs either pad_value or pad_key", 0) end
    return tolen(x, length, sticky, value)
  end
end, false, false), "tolen(length, *, sticky_end=False, pad_value=None, pad_key=None): cuts or "
  .. "pads 1-D tokens to length (sticky_end keeps the last token; pad from pad_value or the "
  .. "first element of data[pad_key])")

local function check_choice(op, name, v, allowed)
  for _, ok in ipairs(allowed) do
    if v == ok then return end
  end
  error(string.format("%s: %s must be one of %s, got '%s'", op, name, table.concat(allowed, ", "),
                      tostring(v)), 0)
end

register("tok", function(a)
  local bos, eos, length = a.bos, a.eos, a.length
  check_choice("tok", "bos", bos, {"no", "yes"})
  check_choice("tok", "eos", eos, {"no", "yes", "sticky"})
  if length ~= nil and (math.type(length) ~= "integer" or length < 0) then
    error("tok: length must be a non-negative integer, got " .. tostring(length), 0)
  end
  local outkey, inkey = a.outkey or a.key, a.inkey or a.key
  if not outkey then error("tok: needs key= or outkey=", 0) end
  local tok = bv.text.tokenizer(a.model)
  local opts = {bos = bos == "yes", eos = eos == "yes" or eos == "sticky"}
  local sticky = eos == "sticky"

  if a.text ~= nil then
    if a.inkey ~= nil then error("tok: either inkey or text, not both", 0) end
    if type(a.text) ~= "string" then error("tok: text must be a string", 0) end
    -- A constant: tokenized once here. Cut only when strictly longer, as big_vision does.
    local tokens = tok:to_int_tensor(a.text, opts)
    if length then
      if tokens:size(1) > length then
        tokens = truncate(tokens, length, sticky)
      else
        tokens = pad_to(tokens, length, tok.pad_token)
      end
    end
    return function(data)
      data[outkey] = tokens:clone()  -- each example owns its tensor
      return data
    end
  end

  if not inkey then error("tok: needs key=, inkey= or text=", 0) end
  return function(data)
    local s = data[inkey]
    if s == nil then pp.missing_key(data, inkey) end
    if type(s) ~= "string" then
      error(string.format("tok: can only tokenize a single string ('%s' holds a %s)", inkey,
                          bv.is_tensor(s) and "tensor" or type(s)), 0)
    end
    local tokens = tok:to_int_tensor(s, opts)
    if length and length > 0 then tokens = tolen(tokens, length, sticky, tok.pad_token) end
    data[outkey] = tokens
    return data
  end
end, "tok(model, length=None, *, bos='no', eos='no', text=None, key=None, inkey=None, "
  .. "outkey=None): tokenizes data[inkey or key] (or the constant text) with a tokenizer spec "
  .. "into int32 ids; bos 'no'/'yes', eos 'no'/'yes'/'sticky'; cut or padded to length if given")

-- The fill value of a mask entry: integers give int32 (as tf.fill of a Python int), floats
-- float32, booleans bool.
local function mask_dtype(v, name)
  if type(v) == "boolean" then return "bool" end
  if math.type(v) == "integer" then return "int32" end
  if math.type(v) == "float" then return "float32" end
  error(string.format("masked_concat: mask '%s' values must be numbers or booleans, got a %s",
                      name, type(v)), 0)
end

register("masked_concat", function(a)
  local keys, outkey, masks = a.keys, a.outkey, a.masks
  if type(keys) ~= "table" or #keys == 0 then error("masked_concat: keys must be a list", 0) end
  for name, values in pairs(masks) do
    if type(values) ~= "table" or #values ~= #keys then
      error(string.format("masked_concat: mask '%s' needs one value per key (%d), got %s", name,
                          #keys, type(values) == "table" and #values or type(values)), 0)
    end
  end
  return function(data)
    -- Read every input first: outkey may be one of the keys.
    local inputs = {}
    for i, k in ipairs(keys) do
      if data[k] == nil then pp.missing_key(data, k) end
      inputs[i] = as_1d(data[k], "masked_concat('" .. k .. "')")
    end
    data[outkey] = bv.cat(inputs, 1)
    for name, values in pairs(masks) do
      local parts = {}
      for i, x in ipairs(inputs) do
        parts[i] = bv.full({x:size(1)}, values[i], mask_dtype(values[i], name))
      end
      data[name] = bv.cat(parts, 1)
    end
    return data
  end
end, "masked_concat(keys, outkey='text', **masks): concatenates the 1-D tensors of keys into "
  .. "outkey and, for each mask name=[v1, v2, ...], a tensor of the same length filled with v_i "
  .. "along key i")
