-- big_vision's general pp ops (pp/ops_general.py): value_range, labels, lookup, choice and
-- choice_no_replacement (whose orders are bv.pp_state's, runtime/pp/visits.h), dict plumbing.
-- Arithmetic runs in C++ (bv.ops, runtime/pp/ops_general.cpp); this file binds arguments and
-- moves keys. Axes given in pp strings are Python's (0-based, negative from the end), because
-- pp strings are big_vision's language.
local pp = require "bv.pp"

local ikok = pp.inkeyoutkey
local register = pp.register

-- An op's input as a tensor: numbers and lists of numbers become one. A boolean is an error
-- naming the example's key (a JSON-L "label": true must not train as label 1). Also ops_image's
-- (value ranges of images).
local function as_tensor(v, what, key)
  if bv.is_tensor(v) then return v end
  if type(v) == "number" or type(v) == "table" then return bv.tensor(v) end
  local holder = key and string.format("%s: key '%s'", what, tostring(key)) or what
  if type(v) == "boolean" then
    error(string.format("%s holds a boolean (%s) where a number or tensor is expected",
                        holder, tostring(v)), 0)
  end
  error(string.format("%s: expected a tensor or number, got a %s", holder, type(v)), 0)
end

register("value_range", ikok(function(a)
  local vmin, vmax, in_min, in_max, clip = a.vmin, a.vmax, a.in_min, a.in_max, a.clip_values
  local key = a.key or a.inkey
  return function(x)
    return bv.ops.value_range(as_tensor(x, "value_range", key), vmin, vmax, in_min, in_max, clip)
  end
end), "value_range(vmin=-1, vmax=1, in_min=0, in_max=255.0, clip_values=False): "
  .. "maps [in_min, in_max] linearly to [vmin, vmax] as float32")

register("onehot", function(a)
  local depth, key, out = a.depth, a.key, a.key_result or a.key
  local multi, on, off = a.multi, a.on, a.off
  return function(data)
    local labels = data[key]
    if labels == nil then pp.missing_key(data, key) end
    data[out] = bv.ops.onehot(as_tensor(labels, "onehot", key), depth, multi, on, off)
    return data
  end
end, "onehot(depth, key='labels', key_result=None, multi=True, on=1.0, off=0.0): "
  .. "one-hot (or multi-hot) float32 labels. A label outside [0, depth) is an error naming it "
  .. "and the depth (unlike big_vision, whose tf.one_hot makes it an all-off row)")

register("keep", function(a)
  local keys = a.keys
  return function(data)
    local out = {}
    for _, k in ipairs(keys) do out[k] = data[k] end
    return out
  end
end, "keep(*keys): keeps only these keys")

register("drop", function(a)
  local keys = a.keys
  return function(data)
    for _, k in ipairs(keys) do data[k] = nil end
    return data
  end
end, "drop(*keys): removes these keys")

-- Lists are copied one level deep so that later in-place edits of one key don't show in the
-- other; tensors are shared, as in big_vision.
local function shallow_copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = x end
  return out
end

register("copy", function(a)
  local inkey, outkey = a.inkey, a.outkey
  return function(data)
    if data[inkey] == nil then pp.missing_key(data, inkey) end
    data[outkey] = shallow_copy(data[inkey])
    return data
  end
end, "copy(inkey, outkey): data[outkey] = data[inkey]")

register("squeeze_last_dim", ikok(function(a)
  local key = a.key or a.inkey
  return function(x) return as_tensor(x, "squeeze_last_dim", key):squeeze(-1) end
end), "squeeze_last_dim(): removes the last dimension (of size 1)")

-- A Python axis (0-based, negative from the end) as bv's 1-based dimension number.
local function lua_dim(axis)
  return axis < 0 and axis or axis + 1
end

register("concat", function(a)
  local inkeys, axis = a.inkeys, a.axis
  local outkey = a.outkey or inkeys[1]
  return function(data)
    local parts = {}
    for i, k in ipairs(inkeys) do
      if data[k] == nil then pp.missing_key(data, k) end
      parts[i] = as_tensor(data[k], "concat", k)
    end
    data[outkey] = bv.cat(parts, lua_dim(axis))
    return data
  end
end, "concat(inkeys, outkey=None, axis=-1): concatenates the tensors of inkeys along a "
  .. "(Python) axis into outkey (default inkeys[0])")

register("pad_to_shape", ikok(function(a)
  if type(a.shape) ~= "table" then
    -- Python reads (4) as the number 4: a one-dimensional shape is (4,) or [4].
    error(string.format("pad_to_shape: shape must be a list such as (4,) or [4], got %s",
                        tostring(a.shape)), 0)
  end
  local shape = {}
  for i, d in ipairs(a.shape) do shape[i] = d == require("bv.literal").null and -1 or d end
  local pad_value, where, key = a.pad_value, a.where, a.key or a.inkey
  return function(x)
    return bv.ops.pad_to_shape(as_tensor(x, "pad_to_shape", key), shape, pad_value, where)
  end
end), "pad_to_shape(shape, pad_value=0, where='after'): pads up to shape (None leaves a "
  .. "dimension); where is after, before or both")

-- Flattens nested tables with string keys into "a/b" names (lists and tensors are values).
local function is_dict(v)
  if type(v) ~= "table" then return false end
  local any = false
  for k in pairs(v) do
    if type(k) ~= "string" then return false end
    any = true
  end
  return any
end

local function flatten_into(out, prefix, v)
  for k, x in pairs(v) do
    local name = prefix and (prefix .. "/" .. k) or k
    if is_dict(x) then flatten_into(out, name, x) else out[name] = x end
  end
end

register("flatten", function(a)
  local keys = a.keys
  return function(data)
    local out = {}
    for k, v in pairs(data) do
      local selected = keys == nil
      if keys then
        for _, want in ipairs(keys) do selected = selected or want == k end
      end
      if selected and is_dict(v) then flatten_into(out, k, v) else out[k] = v end
    end
    return out
  end
end, "flatten(keys=None): nested tables under keys (default all) become 'a/b' keys")

register("reshape", ikok(function(a)
  local shape, key = a.new_shape, a.key or a.inkey
  return function(x) return as_tensor(x, "reshape", key):reshape(shape) end
end), "reshape(new_shape): reshapes, keeping the dtype")

-- An empty value (a tensor with no elements, or an empty list of strings) takes `value`, as a
-- tensor of ones in every dimension (shape [0,0] becomes [1,1]) or as a one-string list.
register("setdefault", function(a)
  local key, value = a.key, a.value
  return function(data)
    local x = data[key]
    if x == nil then
      data[key] = value
    elseif bv.is_tensor(x) then
      if x:numel() == 0 then
        local shape = {}
        for i, d in ipairs(x:shape()) do shape[i] = d == 0 and 1 or d end
        data[key] = bv.full(shape, value, x:dtype())
      end
    elseif type(x) == "table" and #x == 0 then
      data[key] = {value}
    end
    return data
  end
end, "setdefault(key, value): fills a missing or empty value with value")

-- Picks items along the first dimension of each key (tensors or lists), the same items for all.
local function count_items(v)
  if bv.is_tensor(v) then
    if v:dim() == 0 then error("choice: cannot choose from a 0-d tensor", 0) end
    return v:size(1)
  end
  if type(v) == "table" then return #v end
  error("choice: cannot choose from a " .. type(v), 0)
end

local function take(v, indices, single)
  if single then
    if bv.is_tensor(v) then return v[indices[1]] end
    return v[indices[1]]
  end
  if bv.is_tensor(v) then
    local rows = {}
    for i, j in ipairs(indices) do rows[i] = v[j] end
    if #rows == 0 then return v:narrow(1, 1, 0) end
    return bv.stack(rows)
  end
  local out = {}
  for i, j in ipairs(indices) do out[i] = v[j] end
  return out
end

register("choice", function(a)
  local n, fewer_ok = a.n, a.fewer_ok
  local inkeys = pp.maybe_repeat(a.inkey or a.key, 1)
  local outkeys = a.outkey or a.key
  if type(outkeys) ~= "table" then outkeys = {outkeys} end
  if inkeys[1] == nil or outkeys[1] == nil then error("choice: give key or inkey/outkey", 0) end
  if #inkeys ~= #outkeys then error("choice: inkey and outkey have different lengths", 0) end
  local single = n == "single"
  local min_n = single and 1 or type(n) == "table" and n[1] or n
  return function(data, rng)
    if not rng then error("choice: needs a random stream (rng)", 0) end
    local count
    for _, k in ipairs(inkeys) do
      if data[k] == nil then pp.missing_key(data, k) end
      local c = count_items(data[k])
      if count and c ~= count then error("choice: keys have different numbers of items", 0) end
      count = c
    end
    if not fewer_ok and count < min_n then
      error(string.format("choice: needs at least %d items, got %d", min_n, count), 0)
    end
    local indices
    if single then
      indices = {rng:integer(1, count)}
    else
      local want = type(n) == "table" and rng:integer(n[1], n[2]) or n
      -- A partial Fisher-Yates shuffle picks `want` distinct items; sorting keeps their order.
      local perm = {}
      for i = 1, count do perm[i] = i end
      want = math.min(want, count)
      for i = 1, want do
        local j = rng:integer(i, count)
        perm[i], perm[j] = perm[j], perm[i]
      end
      indices = {table.unpack(perm, 1, want)}
      table.sort(indices)
    end
    for i, k in ipairs(inkeys) do
      local out = outkeys[i]:gsub("{key}", k)
      data[out] = take(data[k], indices, single)
    end
    return data
  end
end, "choice(n='single', key=None, fewer_ok=False, inkey=None, outkey=None): picks one "
  .. "item ('single'), n items, or a random count in [lo, hi], the same for every key")

-- lookup's table from a text file: a key per line (value: its 0-based line number, int64), or
-- key<sep>value per line (value: the integer, int32), as big_vision's get_lookup builds it.
local function split_lines(buf)
  local lines = {}
  -- Python's str.splitlines on \n, \r\n and \r; a final newline ends the last line.
  buf = buf:gsub("\r\n", "\n"):gsub("\r", "\n")
  for line in (buf:sub(-1) == "\n" and buf or buf .. "\n"):gmatch("(.-)\n") do
    lines[#lines + 1] = line
  end
  if buf == "" then lines = {} end
  return lines
end

local function read_lookup_table(mapping, sep)
  if type(mapping) ~= "string" then
    error("lookup: mapping must be a file name, got a " .. type(mapping), 0)
  end
  if mapping:match("%.npz$") then
    error(string.format("lookup: mapping '%s' is an .npz file, whose string arrays bvlua's npz "
      .. "reader cannot read: write the names of npzkey one per line to a text file and pass "
      .. "that", bv.snippet(mapping)), 0)
  end
  if sep ~= nil and (type(sep) ~= "string" or sep == "") then
    error("lookup: sep must be a non-empty string or None, got " .. bv.snippet(tostring(sep)), 0)
  end
  local ok, buf = pcall(bv.fs.read_file, mapping)
  if not ok then
    error(string.format("lookup: cannot read mapping '%s': %s", bv.snippet(mapping),
                        tostring(buf)), 0)
  end
  local table_, where = {}, {}
  for i, line in ipairs(split_lines(buf)) do
    local key, value = line, i - 1
    if sep then
      local parts, pos = {}, 1
      while true do
        local a, b = line:find(sep, pos, true)
        if not a then break end
        parts[#parts + 1] = line:sub(pos, a - 1)
        pos = b + 1
      end
      parts[#parts + 1] = line:sub(pos)
      if #parts ~= 2 then
        error(string.format("lookup: %s:%d must be key%svalue (one '%s'), got '%s'",
                            bv.snippet(mapping), i, sep, sep, bv.snippet(line)), 0)
      end
      key = parts[1]
      value = math.tointeger(tonumber((parts[2]:match("^%s*([+-]?%d+)%s*$"))))
      if not value then
        error(string.format("lookup: %s:%d: the value '%s' is not an integer",
                            bv.snippet(mapping), i, bv.snippet(parts[2])), 0)
      end
    end
    if table_[key] ~= nil and table_[key] ~= value then
      error(string.format("lookup: %s: key '%s' on line %d and again on line %d with another "
                          .. "value", bv.snippet(mapping), bv.snippet(key), where[key], i), 0)
    end
    table_[key], where[key] = value, where[key] or i
  end
  return table_, sep and "int32" or "int64"
end

-- Strings (a string or a nested list of them) -> the same shape of values; unknown keys -> -1.
local function lookup_values(x, table_)
  if type(x) == "string" then
    local v = table_[x]
    return v == nil and -1 or v
  end
  if type(x) == "table" then
    local out = {}
    for i, s in ipairs(x) do out[i] = lookup_values(s, table_) end
    return out
  end
  error("lookup: expected a string or a list of strings, got a "
        .. (bv.is_tensor(x) and "tensor" or type(x)), 0)
end

register("lookup", ikok(function(a)
  local table_, dtype = read_lookup_table(a.mapping, a.sep)
  return function(x) return bv.tensor(lookup_values(x, table_), dtype) end
end), "lookup(mapping, npzkey='fnames', sep=None): maps strings to integers read from the "
  .. "text file mapping: a key per line gives its 0-based line number (int64), key<sep>value "
  .. "lines give value (int32); unknown strings give -1. .npz mappings are not supported")

-- The example's identity that choice_no_replacement counts visits by: big_vision's _id, or
-- bvlua's id (every source sets it).
local function example_id(data)
  local id, key = data._id, "_id"
  if id == nil then id, key = data.id, "id" end
  if id == nil then
    local ok, err = pcall(pp.missing_key, data, "_id")
    error("choice_no_replacement: needs the example's id to count its visits: "
          .. tostring(err) .. " (nor 'id')", 0)
  end
  if bv.is_tensor(id) then
    if id:numel() ~= 1 then
      error(string.format("choice_no_replacement: key '%s' must hold one id, got a tensor of %d "
                          .. "values", key, id:numel()), 0)
    end
    id = id:item()
  end
  if type(id) ~= "string" and type(id) ~= "number" then
    error(string.format("choice_no_replacement: key '%s' must hold a string or number id, got "
                        .. "a %s", key, type(id)), 0)
  end
  return type(id) == "number" and string.format("%.17g", id) or id
end

register("choice_no_replacement", function(a)
  local inkeys = pp.maybe_repeat(a.inkey or a.key, 1)
  local outkeys = pp.maybe_repeat(a.outkey or a.key, 1)
  if inkeys[1] == nil or outkeys[1] == nil then
    error("choice_no_replacement: give key or inkey/outkey", 0)
  end
  if #inkeys ~= #outkeys then
    error("choice_no_replacement: inkey and outkey have different lengths", 0)
  end
  -- The op's name in the seed of its orders (and its visit counts outside a pipeline).
  local scope = "choice_no_replacement\0" .. table.concat(inkeys, "\0")
  return function(data, _, visit)
    local count
    for _, k in ipairs(inkeys) do
      if data[k] == nil then pp.missing_key(data, k) end
      if bv.is_tensor(data[k]) and data[k]:dim() == 0 then
        error(string.format("choice_no_replacement: key '%s' is a scalar: there is nothing to "
                            .. "choose from", k), 0)
      end
      local ok, c = pcall(count_items, data[k])
      if not ok then error(string.format("choice_no_replacement: key '%s': %s", k,
                                         tostring(c):gsub("^choice: ", "")), 0) end
      if count and c ~= count then
        error(string.format("choice_no_replacement: keys have different numbers of items (%s: "
                            .. "%d, %s: %d)", inkeys[1], count, k, c), 0)
      end
      count = c
    end
    if count == 0 then
      error(string.format("choice_no_replacement: key '%s' has no items to choose from",
                          inkeys[1]), 0)
    end
    -- The k-th visit of an example gets item k % count of round k // count's order (big_vision's
    -- _shuffled_index). In a pipeline k is the source's epoch, so the pick does not depend on
    -- which worker ran first, and a resumed run picks as the uninterrupted one; called
    -- directly (the REPL) it counts calls per example in this process, as big_vision does.
    local id, k, seed = example_id(data), nil, 0
    if visit then
      k, seed = visit.epoch, visit.seed
    else
      k = bv.pp_state.count_visit(scope, id)
    end
    local index = bv.pp_state.shuffled_item(seed, scope, id, k, count)
    for i, k in ipairs(inkeys) do
      data[outkeys[i]:gsub("{key}", k)] = take(data[k], {index}, true)
    end
    return data
  end
end, "choice_no_replacement(key=None, inkey=None, outkey=None): picks one item of key (the "
  .. "same for every key of a list), an example (by its _id, else id) getting every item once, "
  .. "in a random order, before any repeats (rounds follow the epochs of its source)")

return {as_tensor = as_tensor, split_lines = split_lines}
