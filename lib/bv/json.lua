-- bv.json: JSON for configs and logs, with output that is the same byte for byte on every run
-- (sorted object keys, shortest round-tripping floats), so config.json files can be diffed.
--
-- Lua tables have no array/object tag, so encode decides by shape: a non-empty table whose keys
-- are exactly 1..n is an array, an empty table is {}, anything else is an object and needs
-- string keys. bv.literal.null stands for JSON null in both directions.
local literal = require "bv.literal"

local M = {}

local null = literal.null

-- Shows where in the value an error happened: input.pp, evals.val.pp, schedule[2].
local function child_path(path, key)
  if type(key) == "number" then return path .. "[" .. key .. "]" end
  if path == "" then return key end
  return path .. "." .. key
end

local function where(path)
  if path == "" then return "the top level" end
  return '"' .. path .. '"'
end

local ESC = {
  ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
  ["\b"] = "\\b", ["\f"] = "\\f",
}

local function encode_string(s, ctx, path)
  if not utf8.len(s) then
    error(string.format("%s: invalid UTF-8 in string at %s", ctx.what, where(path)), 0)
  end
  return '"' .. s:gsub('[%c"\\]', function(c)
    return ESC[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

-- Shortest decimal that reads back as the same double, spelled like Python's repr
-- (0.03, 100.0, 1e-05, 1e+16) and always recognisable as a float (never a bare "1").
local function format_float(x)
  local digits
  for p = 1, 17 do
    if tonumber(string.format("%." .. p .. "g", x)) == x then digits = p break end
  end
  digits = digits or 17
  local sci = string.format("%." .. (digits - 1) .. "e", x)
  local exp = tonumber(sci:match("e([-+]%d+)$"))
  local s
  if exp < -4 or exp >= 16 then
    s = sci:gsub("%.?0*e", "e")
  else
    s = string.format("%." .. math.max(digits - 1 - exp, 0) .. "f", x)
  end
  if not s:find("[.e]") then s = s .. ".0" end
  return s
end
M.format_float = format_float

local function encode_number(x, ctx, path)
  if math.type(x) == "integer" then return string.format("%d", x) end
  if x ~= x or x == math.huge or x == -math.huge then
    error(string.format("%s: cannot encode %s at %s (JSON has no inf/nan)",
                        ctx.what, x ~= x and "nan" or tostring(x), where(path)), 0)
  end
  return format_float(x)
end

-- Returns n when t's keys are exactly 1..n (n >= 1), else nil.
local function array_length(t)
  local count = 0
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 then return nil end
    count = count + 1
  end
  if count == 0 or t[count] == nil then return nil end
  return count
end

local encode_value

local function encode_table(t, ctx, path, depth)
  if ctx.open[t] then
    error(string.format("%s: cycle at %s", ctx.what, where(path)), 0)
  end
  -- pairs, not next: a table may list its entries through __pairs (a config read through a
  -- proxy, as tests/lua/config_keys_test.lua does).
  local first, state, init = pairs(t)
  if first(state, init) == nil then return "{}" end
  ctx.open[t] = true
  local parts, n = {}, array_length(t)
  local inner, outer, colon = "", "", ":"
  if ctx.indent then
    inner = "\n" .. string.rep(" ", ctx.indent * (depth + 1))
    outer = "\n" .. string.rep(" ", ctx.indent * depth)
    colon = ": "
  end
  local out
  if n then
    for i = 1, n do
      parts[i] = inner .. encode_value(t[i], ctx, child_path(path, i), depth + 1)
    end
    out = "[" .. table.concat(parts, ",") .. outer .. "]"
  else
    local keys = {}
    for k in pairs(t) do
      if type(k) ~= "string" then
        error(string.format("%s: cannot encode key %s (a %s) at %s; object keys must be strings",
                            ctx.what, tostring(k), type(k), where(path)), 0)
      end
      keys[#keys + 1] = k
    end
    table.sort(keys)
    for i, k in ipairs(keys) do
      local kpath = child_path(path, k)
      parts[i] = inner .. encode_string(k, ctx, kpath) .. colon
        .. encode_value(t[k], ctx, kpath, depth + 1)
    end
    out = "{" .. table.concat(parts, ",") .. outer .. "}"
  end
  ctx.open[t] = nil
  return out
end

function encode_value(v, ctx, path, depth)
  local tv = type(v)
  if v == null then return "null" end
  if tv == "boolean" then return tostring(v) end
  if tv == "number" then return encode_number(v, ctx, path) end
  if tv == "string" then return encode_string(v, ctx, path) end
  if tv == "table" then return encode_table(v, ctx, path, depth) end
  error(string.format("%s: cannot encode %s at %s", ctx.what, tv, where(path)), 0)
end

-- Encodes v as JSON. opts.indent (spaces per level) gives one item per line; without it the
-- output is compact. opts.what names the document in errors (default "json").
function M.encode(v, opts)
  opts = opts or {}
  local ctx = {indent = opts.indent, what = opts.what or "json", open = {}}
  if ctx.indent ~= nil and (math.type(ctx.indent) ~= "integer" or ctx.indent < 0) then
    error("json.encode: indent must be a non-negative integer, got " .. tostring(ctx.indent), 2)
  end
  return encode_value(v, ctx, "", 0)
end

-- Decoding ---------------------------------------------------------------------------------

local function dfail(s, pos, msg)
  error(string.format("json: %s at byte %d", msg, pos), 0)
end

local function skip(s, pos)
  return s:find("[^ \t\r\n]", pos) or #s + 1
end

local UNESC = {
  ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t",
}

local function decode_string(s, pos)
  local out, i = {}, pos + 1
  while true do
    local j = s:find('["\\%c]', i)
    if not j then dfail(s, pos, "unterminated string") end
    out[#out + 1] = s:sub(i, j - 1)
    local c = s:sub(j, j)
    if c == '"' then return table.concat(out), j + 1 end
    if c ~= "\\" then dfail(s, j, "control character in string") end
    local e = s:sub(j + 1, j + 1)
    if UNESC[e] then
      out[#out + 1], i = UNESC[e], j + 2
    elseif e == "u" then
      local hex = s:match("^%x%x%x%x", j + 2)
      if not hex then dfail(s, j, "bad \\u escape") end
      local cp = tonumber(hex, 16)
      i = j + 6
      -- A UTF-16 surrogate pair encodes one code point above U+FFFF.
      local low = cp >= 0xD800 and cp <= 0xDBFF and s:match("^\\u([dD][c-fC-F]%x%x)", i)
      if low then
        cp = 0x10000 + (cp - 0xD800) * 0x400 + (tonumber(low, 16) - 0xDC00)
        i = i + 6
      end
      out[#out + 1] = utf8.char(cp)
    else
      dfail(s, j, "bad escape '\\" .. e .. "'")
    end
  end
end

-- Follows JSON's grammar exactly: no leading zeros, digits after '.' and after the exponent.
local function decode_number(s, pos)
  local int = s:match("^-?%d+", pos)
  if not int or int:match("^-?0%d") then dfail(s, pos, "malformed number") end
  local p = pos + #int
  local frac = s:match("^%.%d+", p) or ""
  if frac == "" and s:sub(p, p) == "." then dfail(s, pos, "malformed number") end
  p = p + #frac
  local exp = s:match("^[eE][-+]?%d+", p) or ""
  if exp == "" and s:find("^[eE]", p) then dfail(s, pos, "malformed number") end
  p = p + #exp
  local v = tonumber(s:sub(pos, p - 1))
  -- Integers too large for 64 bits stay floats rather than failing.
  if frac == "" and exp == "" then v = math.tointeger(v) or v end
  return v, p
end

local decode_value

local function decode_array(s, pos)
  local arr, n = {}, 0
  pos = skip(s, pos + 1)
  if s:sub(pos, pos) == "]" then return arr, pos + 1 end
  while true do
    local v
    v, pos = decode_value(s, pos)
    n = n + 1
    arr[n] = v
    pos = skip(s, pos)
    local c = s:sub(pos, pos)
    if c == "]" then return arr, pos + 1 end
    if c ~= "," then dfail(s, pos, "expected ',' or ']'") end
    pos = pos + 1
  end
end

local function decode_object(s, pos)
  local obj = {}
  pos = skip(s, pos + 1)
  if s:sub(pos, pos) == "}" then return obj, pos + 1 end
  while true do
    if s:sub(pos, pos) ~= '"' then dfail(s, pos, "expected a string key") end
    local k, v
    k, pos = decode_string(s, pos)
    pos = skip(s, pos)
    if s:sub(pos, pos) ~= ":" then dfail(s, pos, "expected ':'") end
    v, pos = decode_value(s, pos + 1)
    obj[k] = v
    pos = skip(s, pos)
    local c = s:sub(pos, pos)
    if c == "}" then return obj, pos + 1 end
    if c ~= "," then dfail(s, pos, "expected ',' or '}'") end
    pos = skip(s, pos + 1)
  end
end

local WORDS = {["true"] = true, ["false"] = false, ["null"] = null}

function decode_value(s, pos)
  pos = skip(s, pos)
  local c = s:sub(pos, pos)
  if c == "{" then return decode_object(s, pos) end
  if c == "[" then return decode_array(s, pos) end
  if c == '"' then return decode_string(s, pos) end
  if c == "-" or c:match("%d") then return decode_number(s, pos) end
  local word = s:match("^%a+", pos)
  if word and WORDS[word] ~= nil then return WORDS[word], pos + #word end
  if c == "" then dfail(s, pos, "unexpected end of input") end
  dfail(s, pos, "unexpected " .. (word and ("'" .. bv.snippet(word) .. "'")
                                  or ("character '" .. bv.snippet(c) .. "'")))
end

-- Decodes one JSON document. Objects and arrays become tables, null becomes bv.literal.null,
-- numbers written without '.' or exponent become integers.
function M.decode(s)
  if type(s) ~= "string" then error("json.decode: expected a string, got " .. type(s), 2) end
  local v, pos = decode_value(s, 1)
  pos = skip(s, pos)
  if pos <= #s then dfail(s, pos, "unexpected text after the value") end
  return v
end

return M
