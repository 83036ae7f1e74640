-- bv.config: big_vision's config semantics for Lua configs.
--
-- A config is a Lua file that returns a table, or a function get_config(arg) that builds one
-- from the text after ':' in `path/to/config.lua:ARGS` (see M.parse_arg for that text), or a
-- module with get_config and the steps the config declares (prepare, register_pp_ops: see
-- "Loading" below).
-- After loading, `--config.a.b=VALUE` overrides replace existing fields, converted to the type
-- the field already has. A field the config lacks or holds None (bv.null) in can be set when a
-- component declares it (bv.config_keys), converted to the declared type, as big_vision's
-- fields that default to None; other keys are an error naming the closest declared one.
local literal = require "bv.literal"
local json = require "bv.json"

local M = {}

local null = literal.null

-- Text -> value conversions shared by parse_arg and override --------------------------------

-- Like Python's int(): optional sign and blanks, decimal digits only ("2.5" is no int).
local function to_int(text)
  local digits = text:match("^%s*([+-]?%d+)%s*$")
  return digits and math.tointeger(tonumber(digits))
end

local SPECIAL_FLOATS = {
  inf = math.huge, ["+inf"] = math.huge, ["-inf"] = -math.huge,
  infinity = math.huge, ["+infinity"] = math.huge, ["-infinity"] = -math.huge,
  nan = 0 / 0, ["+nan"] = 0 / 0, ["-nan"] = 0 / 0,
}

-- Like Python's float(): decimal or exponent notation, inf and nan; Lua's hex forms are not
-- Python's, so they are refused.
local function to_float(text)
  local t = text:match("^%s*(.-)%s*$"):lower()
  if SPECIAL_FLOATS[t] then return SPECIAL_FLOATS[t] end
  if t:find("x", 1, true) then return nil end
  local v = tonumber(t)
  return v and v + 0.0
end

local STRICT_BOOLS = {["true"] = true, ["false"] = false, [""] = false}

-- absl's flag parser accepts these spellings for boolean config fields.
local LOOSE_BOOLS = {
  ["true"] = true, ["false"] = false, ["1"] = true, ["0"] = false,
  yes = true, no = false,
}

-- parse_arg ---------------------------------------------------------------------------------

local TYPE_NAMES = {int = true, float = true, string = true, bool = true}

local function kind_of(v)
  if math.type(v) == "integer" then return "int" end
  if math.type(v) == "float" then return "float" end
  if type(v) == "string" then return "string" end
  if type(v) == "boolean" then return "bool" end
  return nil
end

-- {default, "int"} (default may be nil): exactly keys 2 and maybe 1, [2] a type name.
local function is_typed(v)
  if type(v) ~= "table" or v == null or not TYPE_NAMES[v[2]] then return false end
  for k in pairs(v) do
    if k ~= 1 and k ~= 2 then return false end
  end
  return true
end

local function spec_entry(name, v)
  if type(name) ~= "string" then
    error("parse_arg: spec keys must be strings, got " .. tostring(name), 4)
  end
  if is_typed(v) then return {name = name, default = v[1], kind = v[2]} end
  if v ~= nil and not kind_of(v) then
    -- Lists cannot work: ',' already separates the arguments.
    error(string.format('parse_arg: spec "%s" has a %s default; use an int, float, string, '
      .. 'boolean or {default, "int"|"float"|"string"|"bool"}', name, type(v)), 4)
  end
  return {name = name, default = v, kind = kind_of(v)}
end

-- Spec entries in order: the list part ({{"res", 224}, ...}) first, in the order written,
-- then named fields ({res = 224}) sorted by name. `first` is the key a bare value goes to:
-- the first listed entry, or the only entry; nil when the order is unknown.
local function normalize_spec(spec)
  local entries, by_name = {}, {}
  local function add(e)
    if by_name[e.name] then error('parse_arg: spec key "' .. e.name .. '" given twice', 4) end
    entries[#entries + 1], by_name[e.name] = e, e
  end
  local n = #spec
  for i = 1, n do
    local item = spec[i]
    if type(item) ~= "table" or type(item[1]) ~= "string" then
      error("parse_arg: ordered spec item " .. i .. ' must be {"key", default}', 3)
    end
    add(spec_entry(item[1], item[2]))
  end
  local names = {}
  for k in pairs(spec) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then names[#names + 1] = k end
  end
  table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(names) do add(spec_entry(k, spec[k])) end
  local first = (n > 0 or #entries == 1) and entries[1] and entries[1].name or nil
  return entries, by_name, first
end

local function convert(entry, text)
  local kind, name = entry.kind, entry.name
  if kind == nil then
    error(string.format('parse_arg: key "%s" has a nil default, so its type is unknown; '
      .. 'write it as {nil, "int"} (or "float", "string", "bool")', name), 3)
  end
  local v
  if kind == "bool" then
    v = STRICT_BOOLS[text:lower()]
  elseif kind == "int" then
    v = to_int(text)
  elseif kind == "float" then
    v = to_float(text)
  else
    v = text
  end
  if v == nil then
    local want = ({bool = "true or false", int = "an int", float = "a float"})[kind]
    error(string.format('parse_arg: key "%s" expects %s, got "%s"', name, want,
                        bv.snippet(text)), 3)
  end
  return v
end

-- The type of an argument nobody declared: bool, then int, then float, else string.
local function auto_type(text)
  local b = STRICT_BOOLS[text:lower()]
  if b ~= nil and text ~= "" then return b end
  local i = to_int(text)
  if i then return i end
  local f = to_float(text)
  if f then return f end
  return text
end

-- Reads "flip=true,res=224,name=foo" (big_vision's configs/common.py parse_arg).
-- `spec` gives each key's default, whose type converts the text: {res = 224, flip = false}
-- or, when a bare value must go to the first key, the ordered {{"res", 224}, {"flip", false}}.
-- {default, "int"|"float"|"string"|"bool"} declares the type explicitly (default may be nil).
-- Booleans are strict (true/false, any case; "" is false; a bare `flip` is true).
-- Blanks around keys and values are dropped: "flip=true, crop=false" sets crop (big_vision
-- keeps them, so there " crop" is an unknown key; its int() and float() skip them too).
-- opts.lazy keeps undeclared keys, typed by their text, instead of raising; other unknown keys
-- are an error that quotes them.
-- Returns a plain table; keys with a nil default that were not given are absent.
local function trim(s) return s:match("^%s*(.-)%s*$") end

function M.parse_arg(arg, spec, opts)
  arg = arg or ""
  if type(arg) ~= "string" then error("parse_arg: arg must be a string, got " .. type(arg), 2) end
  arg = trim(arg)
  local entries, by_name, first = normalize_spec(spec or {})
  -- The shortcut: a lone word without ',' or '=' is a flag name or the first key's value.
  if arg ~= "" and not arg:find("[,=]") then
    if by_name[arg] or #entries == 0 then
      arg = arg .. "=True"
    elseif first then
      arg = first .. "=" .. arg
    else
      error(string.format('parse_arg: cannot tell which key "%s" is for (the spec has several '
        .. 'keys and no order); write key=value', bv.snippet(arg)), 2)
    end
  end
  local given, order = {}, {}
  for piece in arg:gmatch("[^,]+") do
    local k, v = piece:match("^([^=]*)=(.*)$")
    if not k then k, v = piece, "True" end
    k, v = trim(k), trim(v)
    if k ~= "" or v ~= "True" then  -- a piece of blanks is an empty piece
      if given[k] == nil then order[#order + 1] = k end
      given[k] = v -- the last duplicate wins
    end
  end
  local out = {}
  for _, e in ipairs(entries) do
    local text = given[e.name]
    given[e.name] = nil
    if text ~= nil then out[e.name] = convert(e, text) else out[e.name] = e.default end
  end
  local left = {}
  for _, k in ipairs(order) do
    if given[k] ~= nil then left[#left + 1] = k end
  end
  if #left > 0 and not (opts and opts.lazy) then
    local known, quoted = {}, {}
    for i, e in ipairs(entries) do known[i] = e.name end
    for i, k in ipairs(left) do  -- quoted, so that a stray character shows
      quoted[i] = string.format('"%s"%s', k, require("bv.suggest").did_you_mean(k, known))
    end
    error(string.format("parse_arg: Unhandled config args remain: %s (known keys: %s)",
      bv.snippet(table.concat(quoted, ", ")), #known > 0 and table.concat(known, ", ") or "none"),
      2)
  end
  for _, k in ipairs(left) do out[k] = auto_type(given[k]) end
  return out
end

-- Loading -----------------------------------------------------------------------------------
--
-- A config file returns one of:
--   a table                  the config itself (it takes no ARGS);
--   a function get_config(arg)  builds the config from the ARGS text (nil without ':');
--   a module table {get_config = function(arg), prepare = function(config),
--                   register_pp_ops = function(), check = function(config)}, all but
--                   get_config optional.
-- Configs are data: running the file and get_config builds a table and does nothing else (no
-- files made, no processes, no pp ops registered), so it may run anywhere and any number of
-- times. What a config needs done declares itself:
--   prepare(config)    makes what the resolved config reads and can be made here (a data set
--                      drawn, a tokenizer trained). `bvlua train` runs it once per run, on rank
--                      0 before any process reads data (M.prepare); it makes only what is
--                      missing, so running it again does nothing.
--   register_pp_ops()  registers the config's own pp ops. Every data worker runs it in its own
--                      Lua state (M.register_pp_ops), without get_config.
--   check(config)      what prepare would refuse or make, without doing it: returns problems,
--                      notes (lists of strings naming their key) and the paths it accounts for
--                      (files prepare makes, or whose absence its problems already explain).
--                      `bvlua train --dry-run` and `bvlua sweep` run it (M.check).
-- The file's top level runs whenever the config is loaded (workers included): keep it to
-- definitions.

local MODULE_KEYS = {get_config = true, prepare = true, register_pp_ops = true, check = true}

-- A table is a config module when it holds one of MODULE_KEYS as a function (a config itself
-- holds no functions: they cannot be saved to config.json).
local function is_module(t)
  for k in pairs(MODULE_KEYS) do
    if type(rawget(t, k)) == "function" then return true end
  end
  return false
end

-- Runs fn() with modules next to the config file requirable by name; restores package.path on
-- errors too, without catching them (keeps their traceback).
local function in_config_dir(path, fn, ...)
  local dir = path:match("^(.*)/[^/]*$") or "."
  local saved = package.path
  package.path = dir .. "/?.lua;" .. dir .. "/?/init.lua;" .. saved
  local _ <close> = setmetatable({}, {__close = function() package.path = saved end})
  return fn(...)
end

-- A file of bvlua's source tree (configs/..., scripts/...), as a path from the current
-- directory when it is below it; `rel` itself when the tree is not where the library is.
function M.tree_path(rel)
  local lib = package.searchpath("bv.config", package.path)
  local path = lib and lib:gsub("lib/bv/config%.lua$", rel)
  if not path or not bv.fs.exists(path) then return rel end
  local n
  repeat path, n = path:gsub("/[^/.][^/]*/%.%./", "/", 1) until n == 0  -- build/../configs
  local cwd = bv.fs.cwd() .. "/"
  if path:sub(1, #cwd) == cwd then path = path:sub(#cwd + 1) end
  return path
end

-- The example that shows a Python config translated: the tutorial's lines_resnet.py.
local EXAMPLE = "configs/lines/resnet.lua"

-- A Python config (big_vision's) given to bvlua: what to write instead. The GPU tutorial's
-- lines_*.py are configs/lines/*.lua.
local function python_config(path)
  local lua = path:gsub("%.py$", ".lua")
  local tutorial = path:match("lines_(%w+)%.py$")
  tutorial = tutorial and M.tree_path("configs/lines/" .. tutorial .. ".lua")
  local near = ""
  if bv.fs.exists(lua) then
    near = string.format(' (there is a "%s")', lua)
  elseif tutorial and bv.fs.exists(tutorial) then
    near = string.format(": the tutorial's %s is %s", path:match("[^/]*$"), tutorial)
  end
  return string.format('config: "%s" is a Python config; bvlua\'s configs are Lua files%s. '
    .. "To translate one: %s is the GPU tutorial's lines_resnet.py in Lua, and the \"Configs\" "
    .. "section of %s has a table of Python -> Lua", path, near, M.tree_path(EXAMPLE),
    M.tree_path("README.md"))
end

-- "path.lua:ARGS" -> path, ARGS (nil without ':'); the file must be readable.
local function split_spec(spec_string, level)
  if type(spec_string) ~= "string" or spec_string == "" then
    error("config: expected CONFIG[:ARGS], got " .. tostring(spec_string), level + 1)
  end
  local path, arg = spec_string:match("^([^:]*):(.*)$")
  path = path or spec_string
  if path:match("%.py$") then error(python_config(path), 0) end
  local f, err = io.open(path, "r")
  if not f then
    -- io.open's message starts with the path already.
    if err:sub(1, #path + 2) == path .. ": " then err = err:sub(#path + 3) end
    error(string.format('config: cannot read "%s": %s', path, err), 0)
  end
  f:close()
  return path, arg
end

-- Runs the file; returns its module: {get_config = fn} or {config = table}, plus prepare and
-- register_pp_ops when declared.
local function load_module(path)
  local chunk, err = loadfile(path, "t")
  if not chunk then error("config: " .. err, 0) end
  local result = chunk()
  if type(result) == "function" then return {get_config = result} end
  if type(result) ~= "table" then
    error(string.format('config: "%s" must return a table or a function get_config(arg), '
      .. "got %s", path, type(result)), 0)
  end
  if not is_module(result) then return {config = result} end
  for k, v in pairs(result) do
    if not MODULE_KEYS[k] then
      error(string.format('config: "%s" returns a module with an unknown key "%s" (a module has '
        .. "get_config, prepare, register_pp_ops and check)", path, tostring(k)), 0)
    end
    if type(v) ~= "function" then
      error(string.format('config: %s in "%s" must be a function, got a %s', k, path, type(v)), 0)
    end
  end
  if not result.get_config then
    error(string.format('config: "%s" returns a module without get_config', path), 0)
  end
  return result
end

local function build(path, arg, module)
  local result = module.config
  if module.get_config then
    result = module.get_config(arg)
    if type(result) ~= "table" then
      error(string.format('config: get_config in "%s" returned a %s, expected a table',
        path, type(result)), 0)
    end
  elseif arg ~= nil then
    error(string.format('config: "%s" returns a table, so it takes no ":%s"; return a '
      .. "function get_config(arg) to accept arguments", path, arg), 0)
  end
  return result
end

-- Loads "path/to/config.lua" or "path/to/config.lua:ARGS" (split at the first ':'). A
-- function result is called with the ARGS text, or nil when there was no ':'. While the file
-- runs, modules next to it can be required by name.
function M.load(spec_string)
  local path, arg = split_spec(spec_string, 2)
  return in_config_dir(path, function() return build(path, arg, load_module(path)) end)
end

-- The config file's module (see above): {get_config = fn | config = table, prepare = fn?,
-- register_pp_ops = fn?}. ARGS after ':' are ignored.
function M.module(spec_string)
  local path = split_spec(spec_string, 2)
  return in_config_dir(path, load_module, path)
end

-- Runs the config's prepare(cfg) (cfg: the resolved config, overrides applied), if it declares
-- one; returns whether it did.
function M.prepare(spec_string, cfg)
  local path = split_spec(spec_string, 2)
  return in_config_dir(path, function()
    local module = load_module(path)
    if not module.prepare then return false end
    module.prepare(cfg)
    return true
  end)
end

-- Applies each {key, value} override to the loaded `cfg` in order, as `bvlua train` and `bvlua
-- sweep` do. Returns the problems (every bad override, not only the first; a config that cannot
-- be written as JSON) and the overrides' notes.
function M.apply_overrides(cfg, overrides)
  local problems, notes = {}, {}
  for _, o in ipairs(overrides or {}) do
    local done, err, note = pcall(M.override, cfg, o[1], o[2])
    if not done then
      problems[#problems + 1] = tostring(err)
    elseif note then
      notes[#notes + 1] = note
    end
  end
  if #problems == 0 then
    local encoded, err = pcall(M.to_json, cfg)
    if not encoded then problems[#problems + 1] = tostring(err) end
  end
  return problems, notes
end

-- Runs the config's check(cfg), if it declares one: returns its problems, notes and the paths
-- its prepare makes (three lists, empty when it declares none).
function M.check(spec_string, cfg)
  local path = split_spec(spec_string, 2)
  return in_config_dir(path, function()
    local module = load_module(path)
    if not module.check then return {}, {}, {} end
    local problems, notes, makes = module.check(cfg)
    return problems or {}, notes or {}, makes or {}
  end)
end

-- Registers the config's own pp ops (its register_pp_ops, if it declares one) in this Lua
-- state, without building the config: what each data worker runs. Returns whether it did.
function M.register_pp_ops(spec_string)
  local path = split_spec(spec_string, 2)
  return in_config_dir(path, function()
    local module = load_module(path)
    if not module.register_pp_ops then return false end
    module.register_pp_ops()
    return true
  end)
end

-- Dotted keys -------------------------------------------------------------------------------

local function split_key(key)
  if type(key) ~= "string" or key == "" then
    error("config: expected a dotted key such as \"input.batch_size\", got " .. tostring(key), 3)
  end
  local segs = {}
  for seg in (key .. "."):gmatch("([^.]*)%.") do
    if seg == "" then error('config: empty segment in key "' .. bv.snippet(key) .. '"', 3) end
    segs[#segs + 1] = seg
  end
  return segs
end

-- A segment of digits also reaches list items ("schedule.2").
local function slot(t, seg)
  if t[seg] == nil and seg:match("^%d+$") then
    local i = math.tointeger(tonumber(seg))
    if t[i] ~= nil then return i end
  end
  return seg
end

-- Like ConfigDict.get("a.b.c"): the value, or `default` when any part is missing.
function M.get(cfg, key, default)
  local t = cfg
  for _, seg in ipairs(split_key(key)) do
    if type(t) ~= "table" or t == null then return default end
    t = t[slot(t, seg)]
    if t == nil then return default end
  end
  return t
end

-- Sets a dotted key, creating missing intermediate tables.
function M.set(cfg, key, value)
  local segs, t = split_key(key), cfg
  for i = 1, #segs - 1 do
    local k = slot(t, segs[i])
    if t[k] == nil then t[k] = {} end
    t = t[k]
    if type(t) ~= "table" or t == null then
      error(string.format('config.set: "%s" is a %s, so "%s" cannot be set',
        table.concat(segs, ".", 1, i), t == null and "null" or type(t), key), 2)
    end
  end
  t[slot(t, segs[#segs])] = value
end

-- Overrides ---------------------------------------------------------------------------------

local function coerce_table(text, flag)
  local ok, v = pcall(literal.parse, text)
  -- Python reads "1,2" as the tuple (1, 2); so do we.
  if not (ok and type(v) == "table") and text:find(",", 1, true) then
    local ok2, v2 = pcall(literal.parse, "[" .. text .. "]")
    if ok2 then ok, v = true, v2 end
  end
  if ok and type(v) == "table" then return v end
  local why = ok and ("it reads as a " .. (v == nil and "None/nil" or type(v))) or v
  error(string.format('%s: expected a table (a Python or Lua literal such as [1, 2] or '
    .. "{'a': 1}), got \"%s\" (%s)", flag, bv.snippet(text), why), 0)
end

local function coerce(cur, text, flag)
  local v, want
  if math.type(cur) == "integer" then
    v, want = to_int(text), "an integer"
  elseif math.type(cur) == "float" then
    v, want = to_float(text), "a number"
  elseif type(cur) == "boolean" then
    v, want = LOOSE_BOOLS[text:lower()], "a boolean (true/false/1/0/yes/no)"
  elseif type(cur) == "string" then
    v = text
  elseif type(cur) == "table" then
    return coerce_table(text, flag)
  else
    error(string.format("%s: cannot override a %s value", flag, type(cur)), 0)
  end
  if v == nil then
    error(string.format('%s: expected %s, got "%s"', flag, want, bv.snippet(text)), 0)
  end
  return v
end

-- A value of declared type `types` ("int", "string|table", ...) from command-line text.
local WANT = {int = "an integer", float = "a number", bool = "a boolean (true/false/1/0/yes/no)",
              string = "a string", table = "a table", list = "a list"}

local function coerce_declared(types, text, flag)
  local alts, tables, wants = {}, false, {}
  for t in types:gmatch("[^|]+") do
    alts[#alts + 1] = t
    wants[#wants + 1] = WANT[t] or t
    if t == "table" or t == "list" then tables = true end
  end
  if tables and (text:match("^%s*[%[{(]") or #alts == 1) then return coerce_table(text, flag) end
  for _, t in ipairs(alts) do
    local v
    if t == "int" then v = to_int(text)
    elseif t == "float" then v = to_float(text)
    elseif t == "bool" then v = LOOSE_BOOLS[text:lower()]
    elseif t == "string" then v = text end
    if v ~= nil then return v end
  end
  error(string.format('%s: expected %s, got "%s"', flag, table.concat(wants, " or "),
                      bv.snippet(text)), 0)
end

-- big_vision lets one of PREFIX_steps/_examples/_epochs/_percent be set: setting one removes
-- the others from table `t`. Returns a note naming what was removed, or nil.
local function replace_durations(t, decl, name, flag)
  if not (decl and decl.duration) then return nil end
  local removed = {}
  for _, unit in ipairs({"steps", "examples", "epochs", "percent"}) do
    local other = decl.duration .. "_" .. unit
    if other ~= name and t[other] ~= nil and t[other] ~= null then
      removed[#removed + 1] = string.format("%s=%s", other, tostring(t[other]))
      t[other] = nil
    end
  end
  if #removed == 0 then return nil end
  return string.format("%s replaces %s (only one %s_* may be set)", flag,
                       table.concat(removed, ", "), decl.duration)
end

-- Sets key `segs` that the config lacks (or holds None), as its declaration says
-- (bv.config_keys); an undeclared key is an error with the closest declared name.
local function override_declared(cfg, segs, i, text, flag)
  local config_keys = require "bv.config_keys"
  local decl, parent = config_keys.lookup(cfg, segs)
  local so_far = table.concat(segs, ".", 1, i)
  if not decl then
    local at = parent.at or i
    local path = table.concat(segs, ".", 1, at)
    local why = parent.known and require("bv.suggest").did_you_mean(segs[at], parent.known) or ""
    if M.get(cfg, path) == null then
      why = why .. ": its value is null and no component declares its type; give it a default "
        .. "in the config"
    end
    error(string.format('unknown config key "%s" (%s)%s', bv.snippet(path), flag, why), 0)
  end
  local value = text == "None" and null or coerce_declared(decl.type, text, flag)
  -- The tables on the way may be missing or None: they become tables.
  local t = cfg
  for j = 1, #segs - 1 do
    local k = slot(t, segs[j])
    if t[k] == nil or t[k] == null then t[k] = {} end
    if type(t[k]) ~= "table" then
      error(string.format('%s: "%s" is a %s, not a table', flag,
                          table.concat(segs, ".", 1, j), type(t[k])), 0)
    end
    t = t[k]
  end
  t[segs[#segs]] = value
  local note = value ~= null and replace_durations(t, decl, segs[#segs], flag) or nil
  return value, note
end

-- Sets a field from command-line text. An existing field's value is converted to its current
-- type: integer, float, boolean (true/false/1/0/yes/no), string (raw), table (a Python or Lua
-- literal, replacing the whole table). A field the config lacks, or holds None in, can be set
-- when a component declares it (bv.config_keys): the text is converted to the declared type.
-- "None" sets bv.null (None). Returns the new value and, when setting one of big_vision's
-- durations (total_steps, ...) removed another (total_epochs, ...), a note saying so.
function M.override(cfg, key, text)
  local flag = "--config." .. bv.snippet(tostring(key))
  if type(text) ~= "string" then
    error(string.format("%s: expected the value as a string, got %s", flag, type(text)), 2)
  end
  local segs, t = split_key(key), cfg
  for i, seg in ipairs(segs) do
    local k = slot(t, seg)
    local v = t[k]
    local so_far = table.concat(segs, ".", 1, i)
    if v == nil or v == null then return override_declared(cfg, segs, i, text, flag) end
    if i == #segs then
      t[k] = text == "None" and null or coerce(v, text, flag)
      local decl = require("bv.config_keys").lookup(cfg, segs)
      local note = t[k] ~= null and replace_durations(t, decl, segs[#segs], flag) or nil
      return t[k], note
    end
    if type(v) ~= "table" then
      error(string.format('unknown config key "%s" (%s): "%s" is a %s, not a table',
        bv.snippet(key), flag, bv.snippet(so_far), type(v)), 0)
    end
    t = v
  end
end

-- Saving ------------------------------------------------------------------------------------

-- Raises, naming the dotted path, for anything that cannot be written to config.json:
-- functions, userdata, threads, inf/nan, non-string keys outside lists, cycles.
function M.validate(cfg)
  if type(cfg) ~= "table" then error("config: expected a table, got " .. type(cfg), 2) end
  json.encode(cfg, {what = "config"})  -- the encoder already names the path of what fails
  return cfg
end

-- The config as JSON (keys sorted; indent optional, compact without it).
function M.to_json(cfg, indent)
  if type(cfg) ~= "table" then error("config: expected a table, got " .. type(cfg), 2) end
  return json.encode(cfg, {indent = indent, what = "config"})
end

-- Command line ------------------------------------------------------------------------------

-- Parses the words after `bvlua train`. Returns
--   {config = "path[:args]", workdir = dir|nil, dry_run = bool, help = bool,
--    nproc = N|nil, backend = "gloo"|"nccl"|nil, device = "auto"|"cpu"|"cuda"|"cuda:N"|nil,
--    profile = {start = N, stop = M}|nil, stop_after = N|nil,
--    overrides = {{key, text}, ...}}   (overrides in command-line order)
-- or nil and a message for usage errors.
function M.parse_cli(argv)
  local r = {dry_run = false, help = false, overrides = {}}  -- debug: only when given
  local i = 1
  local function value_after(flag)
    local v = argv[i + 1]
    if v == nil or v:sub(1, 2) == "--" then return nil, flag .. " needs a value" end
    i = i + 1
    return v
  end
  -- A whole number >= 1 after `flag` (--flag=N or --flag N); else nil and the message.
  local function count_after(flag, eq_value, what)
    local v, err = eq_value, nil
    if not v then v, err = value_after(flag) end
    local n = math.tointeger(tonumber(v or ""))
    if not err and (not n or n < 1) then
      err = string.format("%s needs %s >= 1, got %s", flag, what, tostring(v))
    end
    return n, err
  end
  local function set_config(v)
    if r.config and r.config:find(":.*,$") then  -- "x.lua:flip=true, crop=false" unquoted
      return string.format('two configs given: "%s" and "%s": the shell splits the config\'s '
        .. 'arguments at a blank; write them without blanks (%s%s) or quote them', r.config, v,
        r.config, v)
    end
    if r.config then return string.format('two configs given: "%s" and "%s"', r.config, v) end
    r.config = v
  end
  while i <= #argv do
    local a, err = argv[i], nil
    local name, eq_value = a:match("^(%-%-[^=]*)=(.*)$")
    name = name or a
    if a == "--help" or a == "-h" then
      r.help = true
    elseif a == "--dry-run" then
      r.dry_run = true
    elseif a == "--debug" then
      r.debug = true
    elseif a == "--no-attach" then
      r.no_attach = true
    elseif name == "--workdir" then
      r.workdir = eq_value
      if not eq_value then r.workdir, err = value_after(name) end
      if r.workdir == "" then err = "--workdir needs a value" end
    elseif name == "--nproc" then
      r.nproc, err = count_after(name, eq_value, "a whole number")
    elseif name == "--backend" then
      r.backend = eq_value
      if not eq_value then r.backend, err = value_after(name) end
      if not err and r.backend ~= "gloo" and r.backend ~= "nccl" and r.backend ~= "auto" then
        err = "--backend is gloo, nccl or auto, got " .. tostring(r.backend)
      end
    elseif name == "--device" then
      r.device = eq_value
      if not eq_value then r.device, err = value_after(name) end
      if r.device == "" then err = "--device needs a value (auto, cpu, cuda or cuda:N)" end
    elseif name == "--profile" then
      local v = eq_value
      if not v then v, err = value_after(name) end
      if not err then r.profile, err = require("bv.profile").parse_window(v) end
    elseif name == "--stop-after" then
      r.stop_after, err = count_after(name, eq_value, "a step number")
    elseif name == "--config" then
      local v = eq_value
      if not v then v, err = value_after(name) end
      err = err or set_config(v)
    elseif name:match("^%-%-config%.") then
      local key, v = name:sub(10), eq_value
      if not v then v, err = value_after(name) end
      if key == "" then err = name .. ": missing key after --config." end
      r.overrides[#r.overrides + 1] = {key, v}
    elseif name:match("^%-%-noconfig%.") and not eq_value then
      local key = name:sub(12)
      if key == "" then err = name .. ": missing key after --noconfig." end
      r.overrides[#r.overrides + 1] = {key, "false"}
    elseif a:sub(1, 1) == "-" then
      err = "unknown flag " .. a
    else
      err = set_config(a)
    end
    if err then return nil, err end
    i = i + 1
  end
  if not r.config and not r.help then return nil, "no config given" end
  return r
end

return M
