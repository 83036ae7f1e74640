-- bv.config_keys: the config keys each component reads, with type, default and a one-line doc
-- (big_vision-style registry: plain functions, tables keyed by name).
--
--   config_keys.declare("trainer:classification", {doc = "...", include = {"trainer"}, keys = {
--     {"num_classes", "int", nil, "classes of the model's head"},
--     {"model", "table", nil, "the model's options", scope = function(_, cfg) ... end},
--   }})
--
-- A scope is "KIND:NAME": trainer:NAME (declared in the trainer's file), evaluator:TYPE (in the
-- evaluator's module), model:NAME, optax:NAME, schedule:DECAY_TYPE and data:NAME (read by C++:
-- one file per kind, lib/bv/config_keys/*.lua). Scopes without a kind ("trainer", "input",
-- "evaluator") are shared parts that others `include`.
-- A key: {name, type, default, doc} and optionally
--   scope = "model:vit" | function(value, parent) -> scope name: what the table value holds;
--   each = function(entry, name) -> scope name: a table of named entries (evals);
--   items = function(item) -> table, scope name: a list whose items hold tables (schedule);
--   duration = "total": one of PREFIX_steps/_examples/_epochs/_percent, only one may be set.
-- Types: int, float, bool, string, table, list, and unions such as "string|table". Any key may
-- hold None (bv.null): absent, as in big_vision.
local suggest = require "bv.suggest"
local null = require("bv.literal").null

local M = {}

local scopes = {}  -- name -> {name, doc, include, keys = {decl...}, dynamic}

-- Declares (or replaces) scope `name`: spec = {doc =, include = {scope...}, keys = {...},
-- dynamic = function(t, key) -> scope name for keys named by the data (mixture datasets)}.
function M.declare(name, spec)
  local keys = {}
  for i, k in ipairs(spec.keys or {}) do
    if type(k[1]) ~= "string" or type(k[2]) ~= "string" or type(k[4]) ~= "string" then
      error(string.format("config_keys.declare(%s): key %d needs {name, type, default, doc}",
                          name, i), 2)
    end
    keys[i] = {name = k[1], type = k[2], default = k[3], doc = k[4], scope = k.scope,
               each = k.each, items = k.items, duration = k.duration}
  end
  scopes[name] = {name = name, doc = spec.doc or "", include = spec.include or {}, own = keys,
                  dynamic = spec.dynamic}
end

-- The module that declares a scope of each kind, loaded on first use.
local function load(name)
  local kind, rest = name:match("^([%w_]+):(.+)$")
  local modname
  if kind == "trainer" then
    modname = "bv.trainers." .. rest
  elseif kind == "evaluator" then
    if rest:find("^[%w_]+[%w_.]*$") then modname = "bv.evaluators." .. rest end
  elseif kind then
    modname = "bv.config_keys." .. kind
  elseif name == "evaluator" or name == "eval_input" then
    modname = "bv.evaluators"
  elseif name == "trainer" or name == "input" or name == "input_dataset" then
    modname = "bv.trainers.utils"
  end
  if modname and package.searchpath(modname, package.path) then require(modname) end
end

-- Scope `name` with its includes merged: {name, doc, keys = {decl...} in order, by_name,
-- dynamic}; nil when nothing declares it.
function M.scope(name)
  if type(name) ~= "string" then return nil end
  -- A data source named by a TFDS dataset name (not "bv:..."): the keys of data:tfds.
  if name:find("^data:") and not name:find("^data:bv:") then name = "data:tfds" end
  if not scopes[name] then load(name) end
  local s = scopes[name]
  if not s then return nil end
  local out = {name = name, doc = s.doc, keys = {}, by_name = {}, dynamic = s.dynamic}
  local function add(scope_name)
    if not scopes[scope_name] then load(scope_name) end
    local inc = scopes[scope_name]
    if not inc then error("config_keys: scope " .. name .. " includes unknown " .. scope_name, 0) end
    for _, i in ipairs(inc.include) do add(i) end
    for _, k in ipairs(inc.own) do
      if not out.by_name[k.name] then out.keys[#out.keys + 1] = k end
      out.by_name[k.name] = k
    end
  end
  add(name)
  out.dynamic = out.dynamic or (function()
    for _, i in ipairs(s.include) do
      if scopes[i] and scopes[i].dynamic then return scopes[i].dynamic end
    end
  end)()
  return out
end

function M.names(scope)
  local out = {}
  for i, k in ipairs(scope.keys) do out[i] = k.name end
  return out
end

-- The scope of a config: its trainer's.
function M.root(cfg)
  local trainer = type(cfg) == "table" and cfg.trainer or "classification"
  if type(trainer) ~= "string" or trainer:match("%.lua$") then return nil end
  return "trainer:" .. trainer
end

local function is_table(v) return type(v) == "table" and v ~= null end

-- The scope that the value of `decl` holds (v: the value, maybe nil; parent: its table).
local function scope_of(decl, v, parent)
  local s = decl.scope
  if type(s) == "function" then s = s(is_table(v) and v or nil, parent) end
  return s
end

-- The declaration of key `seg` in `scope` (t: the table being looked into, maybe nil).
local function find(scope, seg, t)
  local d = scope.by_name[seg]
  if d then return d end
  if scope.dynamic and is_table(t) then
    local s = scope.dynamic(t, seg)
    if s then return {name = seg, type = "table", doc = "", scope = s} end
  end
  return nil
end

-- Follows the dotted key `segs` from the config's root through the declarations. Returns the
-- last key's declaration and the table that holds it, or nil and {at = i (the segment that is
-- not declared), known = names declared there} (known nil: nothing declares that table).
function M.lookup(cfg, segs)
  local scope, t = M.scope(M.root(cfg)), cfg
  local i = 1
  while i <= #segs do
    if not scope then return nil, {at = i} end
    local decl = find(scope, segs[i], t)
    if not decl then return nil, {at = i, known = M.names(scope)} end
    if i == #segs then return decl, t end
    local v = is_table(t) and t[segs[i]] or nil
    if decl.each then
      i = i + 1
      if i == #segs then return nil, {at = i} end  -- an entry as a whole: no declared type
      local entry = is_table(v) and v[segs[i]] or nil
      scope, t = M.scope(decl.each(is_table(entry) and entry or nil, segs[i])), entry
    else
      scope, t = M.scope(scope_of(decl, v, t)), v
    end
    i = i + 1
  end
end

-- Warnings ------------------------------------------------------------------------------------

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  return keys
end

local function check(t, scope_name, path, out)
  local scope = M.scope(scope_name)
  if not scope or not is_table(t) then return end
  local known = M.names(scope)
  for _, k in ipairs(sorted_keys(t)) do
    local where = path == "" and k or path .. "." .. k
    local decl = find(scope, k, t)
    local v = t[k]
    if not decl then
      out[#out + 1] = string.format("config key '%s' is not one that %s reads%s", where,
                                    scope_name, suggest.did_you_mean(k, known))
    elseif decl.each and is_table(v) then
      for _, name in ipairs(sorted_keys(v)) do
        if is_table(v[name]) then check(v[name], decl.each(v[name], name), where .. "." .. name, out) end
      end
    elseif decl.items and is_table(v) and #v > 0 then
      for i, item in ipairs(v) do
        local sub, s = decl.items(item)
        if sub then check(sub, s, where .. "." .. i, out) end
      end
    elseif decl.scope and is_table(v) then
      check(v, scope_of(decl, v, t), where, out)
    end
  end
end

-- Warnings for the keys of `cfg` that nothing declared reads (top level, and inside the tables
-- whose declaration is known: model, input, evals.NAME, optax, schedule, data), each naming the
-- key and the closest declared one.
function M.unknown(cfg)
  local out = {}
  local root = M.root(cfg)
  if root and M.scope(root) then check(cfg, root, "", out) end
  return out
end

-- None ----------------------------------------------------------------------------------------

local function keeps_null(decl)
  return decl and decl.items ~= nil  -- a schedule of null is refused by the optimizer, by name
end

-- A copy of `cfg` without the map entries that hold bv.null (None: absent, as big_vision reads
-- them); nulls inside lists stay (schedule {"img/.*", bv.null} freezes, out_dim {bv.null, 8}).
function M.without_nulls(cfg)
  local root = M.scope(M.root(cfg))
  local function strip(t, top)
    local out = {}
    for k, v in pairs(t) do
      if v == null and type(k) == "string" and not (top and keeps_null(root and root.by_name[k])) then
        -- dropped
      elseif is_table(v) then
        out[k] = strip(v, false)
      else
        out[k] = v
      end
    end
    return setmetatable(out, getmetatable(t))
  end
  return strip(cfg, true)
end

-- Docs ----------------------------------------------------------------------------------------

local function show_default(v)
  if v == nil or v == null then return "None" end
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" then return require("bv.json").encode(v) end
  return tostring(v)
end
M.show_default = show_default

-- Every scope name of the declaring modules, loaded (for the reference and the REPL).
function M.all()
  for _, modname in ipairs({"bv.trainers.utils", "bv.trainers.classification",
                            "bv.trainers.proj.paligemma.train", "bv.config_keys.model",
                            "bv.config_keys.optax", "bv.config_keys.schedule",
                            "bv.config_keys.data"}) do
    require(modname)
  end
  for _, t in ipairs(require("bv.evaluators").types()) do require("bv.evaluators").get(t) end
  local names = {}
  for name in pairs(scopes) do
    if name:find(":", 1, true) then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

-- The scopes that `topic` names: a scope's name ("vit", "cosine", "scale_by_adafactor" for
-- big_vision.scale_by_adafactor, "bv:jsonl"); a key's name gives each scope declaring it.
-- Returns text, or nil when no declaration knows the topic.
function M.help(topic)
  local names = M.all()
  local parts = {}
  for _, name in ipairs(names) do
    local rest = name:match("^[%w_]+:(.+)$")
    if rest == topic or rest == "big_vision." .. topic or rest:match("[.:]([^.:]+)$") == topic then
      parts[#parts + 1] = M.describe(name)
    end
  end
  if #parts > 0 then return table.concat(parts, "\n") end
  for _, name in ipairs(names) do
    local d = M.scope(name).by_name[topic]
    if d then
      parts[#parts + 1] = string.format("config key %s (%s): %s, default %s: %s", topic, name,
                                        d.type, show_default(d.default), d.doc)
    end
  end
  return #parts > 0 and table.concat(parts, "\n") or nil
end

-- One scope's keys as text, one per line.
function M.describe(name)
  local s = M.scope(name)
  local lines = {string.format("config keys of %s%s", name, s.doc ~= "" and ": " .. s.doc or "")}
  for _, k in ipairs(s.keys) do
    lines[#lines + 1] = string.format("  %-22s %-13s %-12s %s", k.name, k.type,
                                      show_default(k.default), k.doc)
  end
  return table.concat(lines, "\n")
end

-- The whole reference as markdown (docs/config_keys.md, written by scripts/config_keys).
function M.markdown()
  local out = {"# Config keys", "",
    "Generated by `scripts/config_keys` from the declarations in lib/bv (lib/bv/config_keys.lua "
      .. "explains them); do not edit. In the REPL, `?NAME` shows the same (`?vit`, `?cosine`, "
      .. "`?total_steps`). None (`bv.null` in Lua configs) means absent.", ""}
  for _, name in ipairs(M.all()) do
    local s = M.scope(name)
    out[#out + 1] = "## " .. name
    out[#out + 1] = ""
    if s.doc ~= "" then out[#out + 1] = s.doc .. "\n" end
    out[#out + 1] = "| key | type | default | doc |"
    out[#out + 1] = "|---|---|---|---|"
    for _, k in ipairs(s.keys) do
      out[#out + 1] = string.format("| `%s` | %s | `%s` | %s |", k.name, k.type:gsub("|", "\\|"),
                                    show_default(k.default):gsub("|", "\\|"),
                                    (k.doc:gsub("|", "\\|")))
    end
    out[#out + 1] = ""
  end
  return table.concat(out, "\n")
end

return M
