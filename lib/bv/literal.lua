-- bv.literal: reads one Python or Lua literal out of a string.
--
-- Configs and command lines carry values written either the Python way (what big_vision users
-- type: [1, 2], (224, 224), {'a': None}, True) or the Lua way ({1, 2}, {a = 1, ["b"] = 2}, nil).
-- Both spellings map onto plain Lua values:
--   integers -> Lua integers, numbers with '.' or an exponent -> floats,
--   lists, tuples and Lua array constructors -> Lua arrays,
--   dicts and Lua record constructors -> Lua tables,
--   None / nil -> nil at the top of M.parse, M.null anywhere inside a container (so an array
--   such as [1, None, 3] keeps its length and a dict keeps the key).
local M = {}

-- The stand-in for None/nil inside containers. Compare with `v == literal.null`.
M.null = setmetatable({}, {
  __tostring = function() return "null" end,
  __newindex = function() error("literal.null is read-only", 2) end,
})

local NAMES = {
  True = true, False = false, None = M.null,
  ["true"] = true, ["false"] = false, ["nil"] = M.null,
}

-- Python's single-character escapes (Lua's agree on all of these).
local ESCAPES = {
  n = "\n", t = "\t", r = "\r", ["\\"] = "\\", ["'"] = "'", ['"'] = '"',
  a = "\a", b = "\b", f = "\f", v = "\v", ["0"] = "\0",
}

local function fail(s, pos, msg)
  error(string.format('literal: %s at position %d in "%s"', msg, pos, bv.snippet(s)), 0)
end

local function skip_ws(s, pos)
  return s:find("[^ \t\r\n]", pos) or #s + 1
end

local parse_value -- forward declaration: containers recurse into it

-- Containers nest at most this deep (as JSON does in core/json_util.h): deeper input, such as a
-- command line of 100,000 '[', is an error naming the position, not a Lua stack overflow.
M.MAX_DEPTH = 256
local depth = 0  -- containers open around the current position; M.parse_at resets it

local function enter(s, pos)
  depth = depth + 1
  if depth > M.MAX_DEPTH then
    fail(s, pos, "nested deeper than " .. M.MAX_DEPTH .. " levels")
  end
end

local function parse_number(s, pos)
  local hex = s:match("^[+-]?0[xX]%x+", pos)
  local text = hex
    or s:match("^[+-]?%d+%.?%d*[eE][+-]?%d+", pos)
    or s:match("^[+-]?%.%d+[eE][+-]?%d+", pos)
    or s:match("^[+-]?%d+%.?%d*", pos)
    or s:match("^[+-]?%.%d+", pos)
  if not text then fail(s, pos, "malformed number") end
  local after = pos + #text
  -- "12abc" or "1.2.3" must not silently stop at the digits.
  if s:find("^[%w_.]", after) then fail(s, pos, "malformed number") end
  local v = tonumber(text)
  if not hex and not text:find("[.eE]") and math.type(v) ~= "integer" then
    fail(s, pos, "integer " .. bv.snippet(text) .. " does not fit in 64 bits")
  end
  return v, after
end

local function parse_string(s, pos)
  local quote = s:sub(pos, pos)
  local out, i = {}, pos + 1
  while true do
    local c = s:sub(i, i)
    if c == "" or c == "\n" then fail(s, pos, "unterminated string") end
    if c == quote then return table.concat(out), i + 1 end
    if c == "\\" then
      local e = s:sub(i + 1, i + 1)
      if ESCAPES[e] then
        out[#out + 1], i = ESCAPES[e], i + 2
      elseif e == "x" and s:find("^%x%x", i + 2) then
        out[#out + 1], i = string.char(tonumber(s:sub(i + 2, i + 3), 16)), i + 4
      elseif e == "u" and s:find("^%x%x%x%x", i + 2) then
        out[#out + 1], i = utf8.char(tonumber(s:sub(i + 2, i + 5), 16)), i + 6
      elseif e == "" then
        fail(s, pos, "unterminated string")
      else
        -- Python keeps unknown escapes verbatim ('\d' is backslash + d).
        out[#out + 1], i = "\\" .. e, i + 2
      end
    else
      out[#out + 1], i = c, i + 1
    end
  end
end

-- Parses comma- (or, in Lua constructors, semicolon-) separated items up to `close`.
-- `item(pos)` parses one item and returns the position after it.
local function parse_items(s, pos, close, item, seps)
  pos = skip_ws(s, pos)
  while s:sub(pos, pos) ~= close do
    pos = skip_ws(s, item(pos))
    local c = s:sub(pos, pos)
    if c ~= close then
      if not seps:find(c, 1, true) or c == "" then
        fail(s, pos, "expected ',' or '" .. close .. "'")
      end
      pos = skip_ws(s, pos + 1)
    end
  end
  return pos + 1
end

local function parse_list(s, pos)
  enter(s, pos)
  local list = {}
  local next_pos = parse_items(s, pos + 1, "]", function(p)
    local v
    v, p = parse_value(s, p)
    list[#list + 1] = v
    return p
  end, ",")
  depth = depth - 1
  return list, next_pos
end

-- (x) is just x; (x,) and (x, y) are tuples; () is an empty tuple.
local function parse_paren(s, pos)
  enter(s, pos)
  local items, saw_comma = {}, false
  local p = skip_ws(s, pos + 1)
  while s:sub(p, p) ~= ")" do
    local v
    v, p = parse_value(s, p)
    items[#items + 1] = v
    p = skip_ws(s, p)
    local c = s:sub(p, p)
    if c == "," then
      saw_comma, p = true, skip_ws(s, p + 1)
    elseif c ~= ")" then
      fail(s, p, "expected ',' or ')'")
    end
  end
  depth = depth - 1
  if #items == 1 and not saw_comma then return items[1], p + 1 end
  return items, p + 1
end

-- A Lua `[key] =` field? Returns the key and the position after '=' if so. The key is parsed
-- as a list's first item would be, so an error in it is the list's error too (catching it and
-- parsing again as a list would double the work at every level of nesting).
local function lua_bracket_key(s, pos)
  local p = skip_ws(s, pos + 1)
  if s:sub(p, p) == "]" then return nil end
  local key
  key, p = parse_value(s, p)
  p = skip_ws(s, p)
  if s:sub(p, p) ~= "]" then return nil end
  p = skip_ws(s, p + 1)
  if s:sub(p, p) ~= "=" or s:sub(p + 1, p + 1) == "=" then return nil end
  return key, p + 1
end

-- '{' opens a Python dict ({'a': 1}) or a Lua constructor ({1, 2}, {a = 1, ["b"] = 2}).
local function parse_brace(s, pos)
  enter(s, pos)
  local t, n, dict_style, positional = {}, 0, false, false
  local function store(key, value, at)
    if key == M.null then fail(s, at, "None/nil cannot be a key") end
    if type(key) == "number" and key ~= key then fail(s, at, "NaN cannot be a key") end
    t[key] = value
  end
  local next_pos = parse_items(s, pos + 1, "}", function(p)
    local name, after = s:match("^([%a_][%w_]*)%s*=()", p)
    -- `nil = 1` is no field name; let it fail below as a value.
    if name and NAMES[name] == nil and s:sub(after, after) ~= "=" then
      local v
      v, p = parse_value(s, after)
      store(name, v, p)
      return p
    end
    if s:sub(p, p) == "[" then
      local key, vpos = lua_bracket_key(s, p)
      if vpos then
        local v
        v, p = parse_value(s, vpos)
        store(key, v, p)
        return p
      end
    end
    local v, vp = parse_value(s, p)
    vp = skip_ws(s, vp)
    if s:sub(vp, vp) == ":" then
      if positional then fail(s, p, "dict entry after a list entry") end
      dict_style = true
      local value
      value, vp = parse_value(s, vp + 1)
      store(v, value, p)
      return vp
    end
    if dict_style then fail(s, p, "expected 'key: value'") end
    positional, n = true, n + 1
    t[n] = v
    return vp
  end, ",;")
  depth = depth - 1
  return t, next_pos
end

function parse_value(s, pos)
  pos = skip_ws(s, pos)
  local c = s:sub(pos, pos)
  if c == "" then fail(s, pos, "expected a value, found the end") end
  if c == "'" or c == '"' then return parse_string(s, pos) end
  if c == "[" then return parse_list(s, pos) end
  if c == "(" then return parse_paren(s, pos) end
  if c == "{" then return parse_brace(s, pos) end
  if c:find("[%d.+-]") then return parse_number(s, pos) end
  local name = s:match("^[%a_][%w_]*", pos)
  if name then
    local v = NAMES[name]
    if v == nil then
      fail(s, pos, "unknown name '" .. bv.snippet(name) .. "' (strings need quotes)")
    end
    return v, pos + #name
  end
  fail(s, pos, "unexpected character '" .. bv.snippet(c) .. "'")
end

-- Parses one literal starting at `pos` (default 1) inside a larger string, for callers such
-- as the pp-string parser that read `resize(224, method='bilinear')` argument by argument.
-- Returns the value and the position of the first non-blank character after it. None/nil is
-- returned as M.null here (not nil), so an argument list keeps its positions.
function M.parse_at(s, pos)
  if type(s) ~= "string" then
    error("literal.parse_at: expected a string, got " .. type(s), 2)
  end
  depth = 0
  local v, p = parse_value(s, pos or 1)
  return v, skip_ws(s, p)
end

-- Parses the whole string as one literal; None/nil at the top level gives nil.
function M.parse(s)
  if type(s) ~= "string" then
    error("literal.parse: expected a string, got " .. type(s), 2)
  end
  local v, p = M.parse_at(s, 1)
  if p <= #s then fail(s, p, "unexpected text after the value") end
  if v == M.null then return nil end
  return v
end

return M
