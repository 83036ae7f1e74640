-- PaliGemma's pp ops (big_vision's pp/proj/paligemma/ops.py): tolen, tok, masked_concat, strjoin,
-- majority, getidx. Token ids are int32 tensors; tokenizers are bv.text's (cached), the length
-- helpers ops_text's.
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

-- strjoin: tf.strings.reduce_join of a string or a (nested, rectangular) list of strings.
local function depth_of(x, where)
  if type(x) == "string" then return 0 end
  if type(x) ~= "table" then
    error(string.format("strjoin: expected strings, got a %s%s",
                        bv.is_tensor(x) and "tensor" or type(x), where), 0)
  end
  if #x == 0 then return 1 end
  local d = depth_of(x[1], where)
  for i = 2, #x do
    if depth_of(x[i], where) ~= d then
      error("strjoin: the nested lists are not rectangular" .. where, 0)
    end
  end
  return d + 1
end

local function flat_strings(x, out)
  if type(x) == "string" then
    out[#out + 1] = x
  else
    for _, v in ipairs(x) do flat_strings(v, out) end
  end
  return out
end

-- Joins the lists `xs` element by element (the first axis of what they were taken from).
local function zip_join(xs, glue)
  if #xs == 0 or type(xs[1]) == "string" then return table.concat(xs, glue) end
  local out = {}
  for k = 1, #xs[1] do
    local column = {}
    for i, x in ipairs(xs) do
      if #x ~= #xs[1] then error("strjoin: the nested lists are not rectangular", 0) end
      column[i] = x[k]
    end
    out[k] = zip_join(column, glue)
  end
  return out
end

local function join_axis(x, axis, glue)
  if axis == 0 then return zip_join(x, glue) end
  local out = {}
  for i, v in ipairs(x) do out[i] = join_axis(v, axis - 1, glue) end
  return out
end

register("strjoin", pp.inkeyoutkey(function(a)
  local glue, axis = a.glue, a.axis
  if type(glue) ~= "string" then
    error("strjoin: glue must be a string, got " .. bv.snippet(tostring(glue)), 0)
  end
  if axis ~= nil and math.type(axis) ~= "integer" then
    error("strjoin: axis must be an integer or None, got " .. bv.snippet(tostring(axis)), 0)
  end
  return function(x)
    local rank = depth_of(x, "")
    if axis == nil then return table.concat(flat_strings(x, {}), glue) end
    local ax = axis < 0 and axis + rank or axis
    if ax < 0 or ax >= rank then
      error(string.format("strjoin: axis %d is out of range for %d-D strings", axis, rank), 0)
    end
    return join_axis(x, ax, glue)
  end
end), "strjoin(glue, axis=None): joins strings with glue: all of them (axis=None) into one "
  .. "string, or along a (Python) axis of a nested list")

-- The key under which a value is compared: strings as themselves, numbers by value.
local function as_values(x, op)
  if bv.is_tensor(x) then
    if x:dim() ~= 1 then
      error(string.format("%s: expected a 1-D tensor or list, got a %d-D tensor", op, x:dim()), 0)
    end
    return x:totable(), true
  end
  if type(x) ~= "table" then
    error(string.format("%s: expected a 1-D tensor or list, got a %s", op, type(x)), 0)
  end
  return x, false
end

register("majority", pp.inkeyoutkey(function()
  return function(x)
    local values, tensor = as_values(x, "majority")
    if #values == 0 then error("majority: there are no values to vote on (empty list)", 0) end
    -- tf.unique_with_counts keeps first appearances in order and argmax takes the first
    -- maximum: a tie goes to the value seen first.
    local counts, best, best_count = {}, nil, 0
    for _, v in ipairs(values) do
      if type(v) == "table" then error("majority: expected a 1-D list, got a nested list", 0) end
      counts[v] = (counts[v] or 0) + 1
    end
    for _, v in ipairs(values) do
      if counts[v] > best_count then best, best_count = v, counts[v] end
    end
    if tensor then return bv.tensor(best, x:dtype()) end
    return best
  end
end), "majority(): the most common value of a 1-D list or tensor (ties: the first seen)")

-- An index as Python reads it: 0-based, negative from the end.
local function python_index(i, n, what)
  if bv.is_tensor(i) then
    if i:numel() ~= 1 then
      error(string.format("getidx: %s must hold one index, got a tensor of %d values", what,
                          i:numel()), 0)
    end
    i = i:item()
  end
  if math.type(i) ~= "integer" then
    error(string.format("getidx: %s must hold an integer index, got %s", what,
                        bv.snippet(tostring(i))), 0)
  end
  if i < -n or i >= n then
    error(string.format("getidx: index %d (%s) is out of range for %d items", i, what, n), 0)
  end
  return i < 0 and i + n + 1 or i + 1
end

register("getidx", function(a)
  local inkey, index_key, outkey = a.inkey, a.index_key, a.outkey or a.inkey
  return function(data)
    local array, idx = data[inkey], data[index_key]
    if array == nil then pp.missing_key(data, inkey) end
    if idx == nil then pp.missing_key(data, index_key) end
    local n
    if bv.is_tensor(array) then
      if array:dim() == 0 then error("getidx: key '" .. inkey .. "' is a scalar", 0) end
      n = array:size(1)
    elseif type(array) == "table" then
      n = #array
    else
      error(string.format("getidx: key '%s' must hold a list or tensor, got a %s", inkey,
                          type(array)), 0)
    end
    data[outkey] = array[python_index(idx, n, "key '" .. index_key .. "'")]
    return data
  end
end, "getidx(inkey, index_key, outkey=None): data[outkey or inkey] = data[inkey][data[index_key]] "
  .. "(a 0-based index, negative from the end)")
