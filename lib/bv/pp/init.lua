-- bv.pp: big_vision's pre-processing mini-language.
--
-- A pp string is ops separated by '|' ("decode|resize(256)|value_range(-1, 1)"); each op is a
-- name with optional Python- or Lua-literal arguments. bv.pp.build(spec) turns it into one
-- function from an example (a table of key -> tensor, string, number or list of strings) to an
-- example. Ops come from one registry shared by the built-in ops (ops_general, ops_image,
-- ops_text, archive/randaug and proj/paligemma/ops in this folder) and by ops registered from any
-- Lua file or config:
--
--   bv.pp.register("flip_ud", function(a)
--     return function(data, rng) data.image = data.image:flip(1); return data end
--   end, "flip_ud(): flips the image upside down")
--
-- The doc string's leading signature ("name(p1, p2=default, *rest, key=None, **kw): ...") tells
-- how to bind a call's arguments, with Python's rules; the factory gets them as one table
-- (a.p1, a.p2, a.rest, ...). A doc without a signature passes the call's arguments raw
-- ({positional..., name = value}). Random ops draw only from the `rng` passed to them; an op
-- that must know how often it has seen an example reads the third argument, `visit` (M.build).
local literal = require "bv.literal"

local M = {}

local null = literal.null
local registry = {}      -- name -> {factory, params, doc}
local ikok_of = setmetatable({}, {__mode = "k"})  -- factory -> InKeyOutKey defaults

-- ---------------------------------------------------------------------------------------------
-- Parsing "name(args)" segments

local function skip_ws(s, pos) return s:find("[^ \t\r\n]", pos) or #s + 1 end

-- A segment as error messages quote it: a snippet of at most 200 bytes (bv.snippet).
local function shown(seg) return bv.snippet(seg) end

-- Returns name, positional args, keyword args. Errors say what is wrong and quote the segment.
function M.parse_op(seg)
  local function fail(msg) error(string.format("pp: %s in '%s'", msg, shown(seg)), 0) end
  local pos = skip_ws(seg, 1)
  local name, after = seg:match("^([%a_][%w_]*[%w_.]*)()", pos)
  if not name or name:find("%.%.") or name:sub(-1) == "." then fail("expected an op name") end
  pos = skip_ws(seg, after)
  local args, kwargs = {n = 0}, {}
  if pos > #seg then return name, args, kwargs end
  if seg:sub(pos, pos) ~= "(" then
    fail("unexpected '" .. shown(seg:sub(pos)) .. "' after the op name")
  end
  pos = skip_ws(seg, pos + 1)
  local nargs, seen_keyword = 0, false
  while seg:sub(pos, pos) ~= ")" do
    if pos > #seg then fail("missing ')'") end
    local key, kafter = seg:match("^([%a_][%w_]*)%s*=()", pos)
    if key and seg:sub(kafter, kafter) == "=" then fail("syntax error ('==')") end
    local ok, value, next_pos = pcall(literal.parse_at, seg, key and kafter or pos)
    if not ok then fail(tostring(value):gsub("^literal: ", "bad argument: ")) end
    if key then
      if kwargs[key] ~= nil then fail("keyword argument '" .. shown(key) .. "' repeated") end
      kwargs[key], seen_keyword = value, true
    else
      if seen_keyword then fail("positional argument follows keyword argument") end
      nargs = nargs + 1
      args[nargs] = value
    end
    pos = skip_ws(seg, next_pos)
    local c = seg:sub(pos, pos)
    if c == "," then
      pos = skip_ws(seg, pos + 1)
      if seg:sub(pos, pos) == "," then fail("syntax error (',,')") end
    elseif c ~= ")" then
      fail(pos > #seg and "missing ')'" or ("unexpected '" .. seg:sub(pos, pos) .. "'"))
    end
  end
  if skip_ws(seg, pos + 1) <= #seg then fail("unexpected text after ')'") end
  args.n = nargs
  return name, args, kwargs
end

-- ---------------------------------------------------------------------------------------------
-- Signatures: "resize(size, method='bilinear', antialias=False): ..." -> list of params

local function parse_signature(name, doc)
  if type(doc) ~= "string" then return nil end
  local sig = doc:match("^%s*[%w_.]+(%b())")
  if not sig then return nil end
  local params, kind = {}, "positional"
  for part in sig:sub(2, -2):gmatch("[^,]+") do
    part = part:match("^%s*(.-)%s*$")
    local p
    if part == "*" then
      kind = "keyword"
    elseif part:sub(1, 2) == "**" then
      p = {name = part:sub(3), kind = "kwargs"}
    elseif part:sub(1, 1) == "*" then
      p = {name = part:sub(2), kind = "varargs"}
      kind = "keyword"
    else
      local pname, default = part:match("^([%a_][%w_]*)%s*=%s*(.+)$")
      if pname then
        local ok, v = pcall(literal.parse, default)
        if not ok then
          error(string.format("pp.register('%s'): bad default in signature: %s", name, v), 3)
        end
        p = {name = pname, kind = kind, default = v, optional = true}
      else
        p = {name = part, kind = kind}
      end
    end
    if p then
      if not p.name:match("^[%a_][%w_]*$") then
        error(string.format("pp.register('%s'): bad parameter '%s' in signature", name, part), 3)
      end
      params[#params + 1] = p
    end
  end
  return params
end

-- Binds positional and keyword arguments to params the way Python binds a call.
local function bind(op, params, args, kwargs)
  local bound, taken = {}, {}
  local function fail(msg) error(string.format("pp op '%s': %s", op, msg), 0) end
  local npos, varargs, kwparam = 0, nil, nil
  for _, p in ipairs(params) do
    if p.kind == "positional" then npos = npos + 1 end
    if p.kind == "varargs" then varargs = p end
    if p.kind == "kwargs" then kwparam = p end
  end
  local nargs = args.n or #args
  local i = 0
  for _, p in ipairs(params) do
    if p.kind == "positional" and i < nargs then
      i = i + 1
      bound[p.name], taken[p.name] = args[i], true
    end
  end
  if i < nargs then
    if not varargs then
      fail(string.format("takes %d positional argument%s but %d were given", npos,
                         npos == 1 and "" or "s", nargs))
    end
    local rest = {}
    for j = i + 1, nargs do rest[#rest + 1] = args[j] end
    bound[varargs.name] = rest
  elseif varargs then
    bound[varargs.name] = {}
  end
  local extra = {}
  for k, v in pairs(kwargs) do
    local known = false
    for _, p in ipairs(params) do
      if p.name == k and (p.kind == "positional" or p.kind == "keyword") then known = true end
    end
    if known then
      if taken[k] then fail("got multiple values for argument '" .. k .. "'") end
      bound[k], taken[k] = v, true
    elseif kwparam then
      extra[k] = v
    else
      fail("got an unexpected keyword argument '" .. k .. "'")
    end
  end
  if kwparam then bound[kwparam.name] = extra end
  for _, p in ipairs(params) do
    if (p.kind == "positional" or p.kind == "keyword") and not taken[p.name] then
      if not p.optional then fail("missing required argument '" .. p.name .. "'") end
      bound[p.name] = p.default
    end
  end
  for k, v in pairs(bound) do
    if v == null then bound[k] = nil end  -- None binds as nil
  end
  return bound
end

-- ---------------------------------------------------------------------------------------------
-- The registry

-- Registers (or replaces: a config may be loaded twice, and may override a built-in op) the op
-- `name`. `factory(args)` returns the per-example function `op(data, rng) -> data`.
function M.register(name, factory, doc)
  if type(name) ~= "string" or not name:match("^[%a_][%w_.]*$") then
    error("pp.register: bad op name " .. tostring(name), 2)
  end
  if type(factory) ~= "function" then
    error(string.format("pp.register('%s'): factory must be a function, got %s", name,
                        type(factory)), 2)
  end
  local params = parse_signature(name, doc)
  local ikok = ikok_of[factory]
  if ikok then
    params = params or {}
    params[#params + 1] = {name = "key", kind = "keyword", optional = true}
    params[#params + 1] = {name = "inkey", kind = "keyword", optional = true, default = ikok.inkey}
    params[#params + 1] = {name = "outkey", kind = "keyword", optional = true, default = ikok.outkey}
  end
  registry[name] = {factory = factory, params = params, doc = doc}
end

function M.knows(name) return registry[name] ~= nil end

-- The registry entry {factory, params, doc} of an op, or nil.
function M.get(name) return registry[name] end

-- Sorted names of all registered ops.
function M.names()
  local out = {}
  for k in pairs(registry) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- big_vision's registry.lookup: returns a function that takes the call-time arguments (a table
-- {positional..., name = value}), appends the positionals after the parsed ones, lets its
-- keywords override the parsed ones, binds them and calls the factory.
function M.lookup(seg)
  local name, args, kwargs = M.parse_op(seg)
  local entry = registry[name]
  if not entry then
    local names = {}
    for known in pairs(registry) do names[#names + 1] = known end
    table.sort(names)
    error(string.format("pp: unknown op '%s' in '%s'%s", name, shown(seg),
                        require("bv.suggest").did_you_mean(name, names)), 0)
  end
  return function(call)
    call = call or {}
    local all_args, all_kwargs = {}, {}
    for i = 1, args.n do all_args[i] = args[i] end
    local n = args.n
    for i = 1, #call do
      n = n + 1
      all_args[n] = call[i]
    end
    all_args.n = n
    for k, v in pairs(kwargs) do all_kwargs[k] = v end
    for k, v in pairs(call) do
      if type(k) == "string" then all_kwargs[k] = v end
    end
    if entry.params then return entry.factory(bind(seg, entry.params, all_args, all_kwargs)) end
    local raw = {}
    for i = 1, n do raw[i] = all_args[i] == null and nil or all_args[i] end
    for k, v in pairs(all_kwargs) do raw[k] = v ~= null and v or nil end
    return entry.factory(raw)
  end
end

-- ---------------------------------------------------------------------------------------------
-- InKeyOutKey: ops that map one value to one value get `key`, `inkey`, `outkey` arguments.
-- `factory(args)` returns `fn(x, rng, data) -> new x`; the wrapper reads data[key or inkey]
-- and writes data[key or outkey].

function M.inkeyoutkey(factory, indefault, outdefault)
  if indefault == nil then indefault = "image" end
  if outdefault == nil then outdefault = "image" end
  local function wrapped(a)
    local fn = factory(a)
    local inkey, outkey = a.key or a.inkey, a.key or a.outkey
    if inkey == nil then error("pp: this op needs key= or inkey=", 0) end
    if outkey == nil then error("pp: this op needs key= or outkey=", 0) end
    return function(data, rng)
      local x = data[inkey]
      if x == nil then M.missing_key(data, inkey) end
      data[outkey] = fn(x, rng, data)
      return data
    end
  end
  ikok_of[wrapped] = {inkey = indefault == false and null or indefault,
                      outkey = outdefault == false and null or outdefault}
  return wrapped
end

-- Raises "no key 'image' in the example (keys: label, text)".
function M.missing_key(data, key)
  local keys = {}
  for k in pairs(data) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  error(string.format("no key '%s' in the example (keys: %s)", bv.snippet(tostring(key)),
                      #keys > 0 and bv.snippet(table.concat(keys, ", ")) or "none"), 0)
end

-- big_vision's maybe_repeat: a non-list (a number, string or tensor) becomes n copies.
function M.maybe_repeat(v, n)
  if type(v) == "table" then return v end
  local out = {}
  for i = 1, n do out[i] = v end
  return out
end

-- ---------------------------------------------------------------------------------------------
-- Building a pp function

-- Splits on every '|' like big_vision (so a '|' inside a quoted argument is not supported) and
-- drops empty segments.
function M.segments(spec)
  local out = {}
  for seg in (spec or ""):gmatch("[^|]+") do
    if seg:find("%S") then out[#out + 1] = seg:match("^%s*(.-)%s*$") end
  end
  return out
end

-- Checks that every op of `spec` parses and exists, without building any (no files opened):
-- what a trainer does in its own process before the data workers start. Errors as build's.
function M.check(spec)
  if spec ~= nil and type(spec) ~= "string" then
    error("pp.check: expected a pp string, got " .. type(spec), 2)
  end
  for _, seg in ipairs(M.segments(spec)) do M.lookup(seg) end
end

-- Returns fn(data, rng, visit) -> data applying every op of `spec` in order. Errors while building
-- or running name the op's segment; an op may return nil to mean "the same table, changed".
-- A data pipeline passes `visit` = {epoch = E, seed = S}: the example's visits before this one
-- (its source's epoch) and the pipeline's seed; a call without it (the REPL) passes nil.
function M.build(spec)
  if spec ~= nil and type(spec) ~= "string" then
    error("pp.build: expected a pp string, got " .. type(spec), 2)
  end
  local ops, segs = {}, M.segments(spec)
  for i, seg in ipairs(segs) do
    local ok, op = pcall(function() return M.lookup(seg)({}) end)
    if not ok then
      local msg = tostring(op)
      if not msg:find("'" .. shown(seg), 1, true) then
        msg = string.format("pp op '%s': %s", shown(seg), msg)
      end
      error(msg, 0)
    end
    if type(op) ~= "function" then
      error(string.format("pp op '%s': its factory returned a %s, not a function", shown(seg),
                          type(op)), 0)
    end
    ops[i] = op
  end
  return function(data, rng, visit)
    if type(data) ~= "table" then
      error(string.format("pp: an example must be a table, got %s", type(data)), 2)
    end
    for i = 1, #ops do
      local ok, out = pcall(ops[i], data, rng, visit)
      if not ok then error(string.format("pp op '%s': %s", shown(segs[i]), tostring(out)), 0) end
      if out ~= nil then
        if type(out) ~= "table" then
          error(string.format("pp op '%s' returned a %s, not an example table", shown(segs[i]),
                              type(out)), 0)
        end
        data = out
      end
    end
    return data
  end
end

-- The built-in ops register themselves into this module; each file is named as big_vision's
-- (pp/ops_general.py, ..., pp/archive/randaug.py, pp/proj/paligemma/ops.py).
package.loaded["bv.pp"] = M
for _, mod in ipairs({"bv.pp.ops_general", "bv.pp.ops_image", "bv.pp.ops_text",
                      "bv.pp.archive.randaug", "bv.pp.proj.paligemma.ops"}) do
  if package.searchpath(mod, package.path) then require(mod) end
end

return M
