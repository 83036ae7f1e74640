-- big_vision's text pp ops (pp/ops_text.py): strfmt and lower here, the tokenizing ones in
-- ops_tokenizer.lua (loaded at the end).
local pp = require "bv.pp"

-- Shortest decimal that reads back as the same float32, like TF's float printing.
local function format_float32(x)
  local want = string.pack("f", x)
  for digits = 6, 9 do
    local s = string.format("%." .. digits .. "g", x)
    if string.pack("f", tonumber(s)) == want then return s end
  end
  return string.format("%.9g", x)
end

-- A value as tf.strings.format("{}", v, summarize=-1) prints it: 42, 3.14, [0 1 2].
local function render(v)
  if bv.is_tensor(v) then v = v:totable() end
  if type(v) == "string" then return v end
  if type(v) == "boolean" then return v and "True" or "False" end
  if type(v) == "number" then
    if math.type(v) == "integer" then return string.format("%d", v) end
    return format_float32(v)
  end
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = render(x) end
    return "[" .. table.concat(parts, " ") .. "]"
  end
  error("strfmt: cannot format a " .. type(v), 0)
end

-- Splits a Python format template into literal text and field names ("{{" and "}}" are braces).
local function parse_template(template)
  local parts, pos, text = {}, 1, {}
  while pos <= #template do
    local c = template:sub(pos, pos)
    local two = template:sub(pos, pos + 1)
    if two == "{{" or two == "}}" then
      text[#text + 1] = c
      pos = pos + 2
    elseif c == "{" then
      local close = template:find("}", pos, true)
      if not close then error("strfmt: unmatched '{' in template '" .. template .. "'", 0) end
      local field = template:sub(pos + 1, close - 1)
      if field == "" or field:find("[:!{]") then
        error("strfmt: only plain {field} names are supported, got '{" .. field .. "}'", 0)
      end
      parts[#parts + 1] = table.concat(text)
      parts[#parts + 1] = {field = field}
      text = {}
      pos = close + 1
    elseif c == "}" then
      error("strfmt: single '}' in template '" .. template .. "'", 0)
    else
      text[#text + 1] = c
      pos = pos + 1
    end
  end
  parts[#parts + 1] = table.concat(text)
  return parts
end

pp.register("strfmt", function(a)
  local parts, outkey = parse_template(a.template), a.outkey
  return function(data)
    local out = {}
    for i, p in ipairs(parts) do
      if type(p) == "string" then
        out[i] = p
      else
        local v = data[p.field]
        if v == nil then pp.missing_key(data, p.field) end
        out[i] = render(v)
      end
    end
    data[outkey] = table.concat(out)
    return data
  end
end, "strfmt(template, outkey='text'): fills {key} fields of a Python-style template from "
  .. "the example")

pp.register("lower", pp.inkeyoutkey(function()
  return function(x)
    if type(x) == "string" then return x:lower() end
    if type(x) == "table" then
      local out = {}
      for i, s in ipairs(x) do out[i] = s:lower() end
      return out
    end
    error("lower: expected a string or a list of strings, got a " .. type(x), 0)
  end
end, "text", "text"), "lower(): lower-cases a string or a list of strings (ASCII)")

-- The ops that need a tokenizer (tokenize, and PaliGemma's tok, tolen, masked_concat).
require "bv.pp.ops_tokenizer"
