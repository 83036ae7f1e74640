-- bv.repl: the Lua half of `bvlua repl` (the native half, bindings/repl.cpp, reads lines with
-- libedit, handles Ctrl-C and runs what is typed). Here: what a value looks like at the prompt,
-- which names Tab offers, the `?name` docs, and the entry points.
--
--   bvlua repl                    a prompt
--   bvlua repl runs/x             ... with `run`, `config` and `ckpt` (bv.inspect.run), and
--                                 the pp ops of the config it was trained from
--                                 (bv.config_source)
--   bvlua repl params.npz         ... with `ckpt` opened lazily (bv.inspect.checkpoint)
--   require("bv.repl").start({globals = {...}, banner = "..."})   -- e.g. train --debug
--
--   repl.show(v) -> text          tables to repl.depth levels, tensors as one line inside
--                                 tables and with their values when small, trees of tensors
--                                 (parameters, batches) with dtypes, shapes and counts
--   repl.complete(line) -> start, candidates   what Tab offers at the end of `line`
--   repl.help(topic) -> text      `?topic`
local inspect = require "bv.inspect"

local M = {}

M.depth = 4        -- nested tables deeper than this print as {...}
M.max_items = 50   -- entries shown per table
M.max_rows = 60    -- rows of a tensor tree printed as a value (ckpt:tree() prints them all)
M.width = 100      -- a table whose one-line form fits prints on one line

local function native() return require "bv._repl" end

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
            repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

-- ---------------------------------------------------------------------------------------------
-- Printing

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") ~= nil
end

local function quote(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end

local function key_text(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") and not KEYWORDS[k] then return k end
  return "[" .. (type(k) == "string" and quote(k) or tostring(k)) .. "]"
end

-- One value inside a table: strings quoted, tensors as their one-line summary.
local function scalar_text(v)
  if type(v) == "string" then return quote(v) end
  return tostring(v)
end

-- Array entries first (1..n in order), then numbers, then strings in natural order.
local function ordered_keys(t)
  local n = #t
  local keys, rest = {}, {}
  for i = 1, n do keys[i] = i end
  for k in pairs(t) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then rest[#rest + 1] = k end
  end
  table.sort(rest, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == "number" then return a < b end
    if ta == "string" then return inspect.natural_less(a, b) end
    return tostring(a) < tostring(b)
  end)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  return keys, n
end

local function render(v, indent, depth, seen)
  if type(v) ~= "table" or has_tostring(v) then return scalar_text(v) end
  if seen[v] then return "<cycle>" end
  if next(v) == nil then return "{}" end
  if depth > M.depth then return "{...}" end
  seen[v] = true
  local keys, n = ordered_keys(v)
  local parts, multiline = {}, false
  for i, k in ipairs(keys) do
    if i > M.max_items then
      parts[#parts + 1] = string.format("... (%d more)", #keys - M.max_items)
      break
    end
    local value = render(v[k], indent .. "  ", depth + 1, seen)
    multiline = multiline or value:find("\n") ~= nil
    parts[#parts + 1] = (math.type(k) == "integer" and k >= 1 and k <= n) and value
      or key_text(k) .. " = " .. value
  end
  seen[v] = nil
  local one_line = "{" .. table.concat(parts, ", ") .. "}"
  if not multiline and #indent + #one_line <= M.width then return one_line end
  local inner = indent .. "  "
  return "{\n" .. inner .. table.concat(parts, ",\n" .. inner) .. ",\n" .. indent .. "}"
end

local function is_model(v)
  return type(v) == "table" and type(v.name) == "string" and type(v.specs) == "table"
    and type(v.param_shapes) == "function"
end

-- The text the prompt shows for a value.
function M.show(v)
  if bv.is_tensor(v) then
    if v:numel() <= bv.print_threshold then return v:format() end
    return tostring(v)
  end
  if type(v) ~= "table" or has_tostring(v) then return tostring(v) end
  if is_model(v) then
    return inspect.tree(v:param_shapes(), {max_rows = M.max_rows, title = string.format(
      "model %s %s", v.name, require("bv.json").encode(v.cfg or {}))})
  end
  local items = inspect.tensor_items(v)
  if items then
    local flat = true
    for _, item in ipairs(items) do flat = flat and not item.name:find("/") end
    return inspect.tree(items, {max_rows = M.max_rows, noun = flat and "elements" or nil})
  end
  return render(v, "", 1, {})
end

-- Prints the values of an expression typed at the prompt; `_` keeps the first.
function M.show_results(...)
  local n = select("#", ...)
  local parts, multiline = {}, false
  for i = 1, n do
    parts[i] = M.show((select(i, ...)))
    multiline = multiline or parts[i]:find("\n") ~= nil
  end
  _G._ = (...)
  io.write(table.concat(parts, multiline and "\n" or "\t"), "\n")
end

-- ---------------------------------------------------------------------------------------------
-- Completion

local function callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__call") ~= nil
end

-- Indexing without letting an error out (a checkpoint loads a tensor on an unknown name).
local function get(obj, key)
  if type(obj) == "table" then
    local v = rawget(obj, key)
    if v ~= nil then return v end
  end
  local ok, v = pcall(function() return obj[key] end)
  if ok then return v end
  return nil
end

-- The modules bv loads on first use (bv.config, bv.inspect, ...): lib/bv/*.lua and folders.
local function bv_modules()
  local init = package.searchpath("bv", package.path)
  if not init then return {} end
  local dir = init:match("^(.*/)init%.lua$")
  local out = {}
  for _, name in ipairs(dir and native().listdir(dir) or {}) do
    local mod = name:match("^([%a_][%w_]*)%.lua$") or name:match("^([%a_][%w_]*)/$")
    if mod and mod ~= "init" then out[#out + 1] = mod end
  end
  return out
end

-- Names reachable from `obj` with `.` (or `:` when methods_only): its own keys, then along its
-- metatables' __index tables (and a `methods` table, where native types keep theirs).
function M.fields(obj, methods_only)
  local names, seen = {}, {}
  local function add(name, v)
    if type(name) == "string" and name:match("^[%a_][%w_]*$") and not seen[name]
        and (not methods_only or callable(v)) then
      seen[name] = true
      names[#names + 1] = name
    end
  end
  local function add_table(t)
    for k, v in next, t do add(k, v) end
  end
  local t = obj
  for _ = 1, 10 do
    if type(t) == "table" then add_table(t) end
    local mt = getmetatable(t)
    if type(mt) ~= "table" then break end
    if type(rawget(mt, "methods")) == "table" then add_table(rawget(mt, "methods")) end
    local index = rawget(mt, "__index")
    if type(index) ~= "table" then
      if type(index) == "function" and rawequal(t, rawget(_G, "bv")) then
        for _, mod in ipairs(bv_modules()) do add(mod, {}) end
      end
      break
    end
    t = index
  end
  table.sort(names)
  return names
end

-- The start (1-based) of the unfinished string literal `line` ends in, or nil.
local function open_string(line)
  local i, quote_char, start = 1, nil, nil
  while i <= #line do
    local c = line:sub(i, i)
    if quote_char then
      if c == "\\" then
        i = i + 1
      elseif c == quote_char then
        quote_char = nil
      end
    elseif c == '"' or c == "'" then
      quote_char, start = c, i + 1
    elseif line:sub(i, i + 1) == "--" then
      return nil
    end
    i = i + 1
  end
  return quote_char and start or nil
end

local function complete_path(word)
  local dir, base = word:match("^(.*/)([^/]*)$")
  if not dir then dir, base = "", word end
  local out = {}
  for _, name in ipairs(native().listdir(dir == "" and "." or dir) or {}) do
    local hidden = name:sub(1, 1) == "."
    if name:sub(1, #base) == base and (not hidden or base:sub(1, 1) == ".") then
      out[#out + 1] = dir .. name
    end
  end
  return out
end

-- What Tab offers for the end of `line`: start (1-based) of the word being completed, and the
-- words that may replace line:sub(start). Globals and keywords; fields after `.`, methods after
-- `:` (following metatables); file names inside a string.
function M.complete(line)
  local in_string = open_string(line)
  if in_string then return in_string, complete_path(line:sub(in_string)) end
  local start = line:find("[%w_.:]*$")
  local word = line:sub(start)
  if word:match("^[%d.]") then return start, {} end
  local base, sep, partial = word:match("^(.*)([.:])([%w_]*)$")
  local out = {}
  if not base then
    local names = M.fields(_G)
    for k in pairs(KEYWORDS) do names[#names + 1] = k end
    table.sort(names)
    for _, name in ipairs(names) do
      if name:sub(1, #word) == word and (name:sub(1, 1) ~= "_" or word:sub(1, 1) == "_") then
        out[#out + 1] = name
      end
    end
    return start, out
  end
  if base == "" or base:find(":") or base:find("%.%.") then return start, {} end
  local obj = _G
  for part in base:gmatch("[^.]+") do
    obj = get(obj, part)
    if obj == nil then return start, {} end
  end
  for _, name in ipairs(M.fields(obj, sep == ":")) do
    if name:sub(1, #partial) == partial and (name:sub(1, 1) ~= "_" or partial:sub(1, 1) == "_") then
      out[#out + 1] = base .. sep .. name
    end
  end
  return start, out
end

-- ---------------------------------------------------------------------------------------------
-- Help

M.USAGE = [[
bvlua repl: Lua 5.4 with the bv library.
  EXPR          prints its value: tables to bv.repl.depth levels, tensors with their values
                when small, tables of tensors as a tree with dtypes, shapes and counts
  STATEMENT;    a trailing ';' runs it without printing; `_` is the last value printed
  Tab           completes globals, fields after '.', methods after ':' and file names inside
                a string; a second Tab lists the candidates
  ?NAME         the doc of a pp op, model, evaluator, optimizer or Lua function, and the
                config keys it reads (type, default, doc); a key's name, who reads it:
                ?resize  ?vit  ?classification  ?cosine  ?total_epochs  ?bv:jsonl  ?ckpt:diff
  Ctrl-C        stops the running command (or drops the line being typed); Ctrl-D exits
  history       kept in $BVLUA_HISTORY, else ~/.bvlua_history (BVLUA_HISTORY= for none)
Checkpoints, read lazily (`bvlua repl FILE.npz` opens one as `ckpt`):
  ckpt = bv.inspect.checkpoint("x.npz")   ckpt:tree(prefix, depth)   ckpt["img/head/kernel"]
  ckpt:stats(pattern)   ckpt:diff(other [, pattern])   ckpt:sub("params")   ckpt:params(prefix)
Runs (`bvlua repl WORKDIR` opens one as `run`, with `config` and `ckpt`):
  run.metrics(name) -> steps, values   run.model() -> model, params   run.pp(eval)(example)
  run.batch(eval, n)   run.predict("image.png") -> {class =, name =, prob =, top = {...}}:
  class ids 0-based, as the data's labels; name when the data has class names (an image
  folder's folders, a TFDS ClassLabel's names)]]

-- The comment block right above line `line` of a Lua file (the doc of what is defined there).
local function comment_above(path, line)
  local f = io.open(path, "r")
  if not f then return nil end
  local lines = {}
  for l in f:lines() do
    lines[#lines + 1] = l
    if #lines >= line then break end
  end
  f:close()
  local doc = {}
  for i = line - 1, 1, -1 do
    local c = lines[i] and lines[i]:match("^%s*%-%-+ ?(.*)$")
    if not c then break end
    table.insert(doc, 1, c)
  end
  return lines[line] and lines[line]:match("^%s*(.-)%s*$"), table.concat(doc, "\n")
end

-- The first paragraph of a Lua file's leading comment, as one line.
local function file_doc(path)
  local f = path and io.open(path, "r")
  if not f then return nil end
  local words = {}
  for l in f:lines() do
    local c = l:match("^%-%-+ ?(.*)$")
    if not c or c:match("^%s*$") then break end
    words[#words + 1] = c:match("^%s*(.-)%s*$")
  end
  f:close()
  return #words > 0 and table.concat(words, " ") or nil
end

local function function_doc(name, fn)
  local info = debug.getinfo(fn, "S")
  if info.what == "C" then return name .. ": a native function (bindings/, no doc string)" end
  local path = info.source:match("^@(.*)$")
  local def, doc = nil, nil
  if path then def, doc = comment_above(path, info.linedefined) end
  local where = string.format("%s:%d", info.short_src, info.linedefined)
  return string.format("%s  (%s)\n%s", def or name, where,
                       doc and doc ~= "" and doc or "(no comment above its definition)")
end

-- The name under which `t` sits in package.loaded, for a module's file.
local function module_name(t)
  for name, mod in pairs(package.loaded) do
    if rawequal(mod, t) and type(name) == "string" then return name end
  end
  return nil
end

-- Resolves "a.b.c" or "a.b:c" from the globals; nil when any part is missing.
local function resolve(topic)
  if not topic:match("^[%a_][%w_]*[%w_.:]*$") or topic:find("[.:][.:]") then return nil end
  local path, method = topic:match("^(.-):([%a_][%w_]*)$")
  path = path or topic
  local obj = _G
  for part in path:gmatch("[^.]+") do
    obj = get(obj, part)
    if obj == nil then return nil end
  end
  if method then obj = get(obj, method) end
  return obj
end

local function lua_value_doc(topic)
  local v = resolve(topic)
  if v == nil then return nil end
  if type(v) == "function" then return function_doc(topic, v) end
  if type(v) == "table" and not has_tostring(v) then
    local modname = module_name(v)
    local path = modname and package.searchpath(modname, package.path)
    local doc = file_doc(path)
    local fields = M.fields(v)
    local head = doc and (topic .. ": " .. doc) or (topic .. ": a table")
    if #fields > 0 then head = head .. "\n  fields: " .. table.concat(fields, ", ") end
    return head
  end
  local kind = bv.is_tensor(v) and "a tensor" or type(v)
  local text = string.format("%s: %s, %s", topic, kind, tostring(v))
  local methods = M.fields(v, true)
  if type(v) ~= "string" and #methods > 0 then
    text = text .. "\n  methods: " .. table.concat(methods, ", ")
  end
  return text
end

local function optimizer_doc(topic)
  local docs = bv.optim and rawget(bv.optim, "docs")
  if type(docs) ~= "function" then return nil end
  local all = docs()
  local name = all[topic] and topic or all["big_vision." .. topic] and "big_vision." .. topic
  return name and string.format("optimizer (optax_name) %s: %s", name, all[name]) or nil
end

local function evaluator_doc(topic)
  if not topic:match("^[%a_][%w_.]*$") then return nil end
  local evaluators = require "bv.evaluators"
  local ok, module = pcall(evaluators.get, topic)
  if not ok then return nil end
  local doc = type(module.doc) == "string" and module.doc
    or file_doc(package.searchpath("bv.evaluators." .. topic, package.path))
  return string.format("evaluator (evals.*.type) %s: %s", topic, doc or "(no doc)")
end

-- The config keys a trainer, model, optimizer, schedule, evaluator or data source reads
-- (bv.config_keys), or the scopes that declare key `topic`.
local function config_keys_doc(topic)
  if not topic:match("^[%w_.:]+$") then return nil end
  return require("bv.config_keys").help(topic)
end

-- The docs of `topic` from every registry that knows it: pp ops, models, evaluators,
-- optimizers, and Lua values reachable from the globals.
function M.help(topic)
  topic = topic and topic:match("^%s*(.-)%s*$") or ""
  if topic == "" then return M.USAGE end
  local found = {}
  local op = bv.pp.get(topic)
  if op then found[#found + 1] = "pp op " .. (op.doc or (topic .. " (no doc)")) end
  for _, name in ipairs(bv.models.names()) do
    if name == topic then
      local doc = bv.models.doc(name)
      found[#found + 1] = "model " .. name .. ": " .. (doc ~= "" and doc or "(no doc)")
    end
  end
  for _, fn in ipairs({evaluator_doc, optimizer_doc, config_keys_doc, lua_value_doc}) do
    local doc = fn(topic)
    if doc then found[#found + 1] = doc end
  end
  if #found == 0 then
    return string.format("no doc for '%s': not a pp op, model, evaluator, optimizer, config key "
      .. "or Lua name (? alone explains the REPL)", topic)
  end
  return table.concat(found, "\n")
end

-- Lines the prompt handles itself instead of running them: `?` and `?topic`.
function M.special(line)
  local topic = line:match("^%s*%?(.*)$")
  if not topic then return false end
  io.write(M.help(topic), "\n")
  return true
end

-- ---------------------------------------------------------------------------------------------
-- Entry points

-- The prompt's history file: $BVLUA_HISTORY ("" for none), else ~/NAME (default .bvlua_history;
-- `bvlua attach` keeps its own); false when there is no home.
function M.history_file(name)
  local env = os.getenv("BVLUA_HISTORY")
  if env then return env ~= "" and env or false end
  local home = os.getenv("HOME")
  return home and home .. "/" .. (name or ".bvlua_history") or false
end

-- Runs the prompt with `opts.globals` set and `opts.banner` printed first; returns when the
-- user presses Ctrl-D (or input ends).
function M.start(opts)
  opts = opts or {}
  for name, v in pairs(opts.globals or {}) do _G[name] = v end
  if opts.banner and opts.banner ~= "" then io.write(opts.banner, "\n") end
  if native().isatty(0) then
    io.write(string.format("bvlua %s (Lua 5.4, libtorch %s): ? for help, Ctrl-D to exit\n",
                           bv.version, bv.torch_version))
  end
  io.flush()
  native().loop({history = M.history_file()})
end

-- A workdir is a directory that is not itself a checkpoint directory.
local function is_workdir(path)
  return bv.fs.is_dir(path) and not (bv.fs.exists(path .. "/manifest.json")
    and bv.fs.exists(path .. "/tensors.safetensors"))
end

-- `bvlua repl [PATH]`; returns the exit code.
function M.main(args)
  args = args or {}
  if #args > 1 or (args[1] and args[1]:sub(1, 1) == "-") then
    io.stderr:write("bvlua repl: unexpected argument '", args[#args > 1 and 2 or 1], "'\n",
                    "usage: bvlua repl [WORKDIR | CHECKPOINT]\n")
    return 2
  end
  local path = args[1]
  local globals, banner = {}, nil
  if path then
    if not bv.fs.exists(path) then
      io.stderr:write("bvlua repl: no such file or directory: ", path, "\n")
      return 1
    end
    local ok, err = pcall(function()
      if is_workdir(path) then
        local run = inspect.run(path)
        globals.run, globals.config, globals.ckpt = run, run.config, run.ckpt
        banner = tostring(run)
        -- The config's own pp ops (run.pp, ?name), from the config file the run recorded.
        local _, warning = require("bv.config_source").register_pp_ops(path, run.config)
        if warning then io.stderr:write("bvlua repl: WARNING: ", warning, "\n") end
      else
        local ckpt = inspect.checkpoint(path)
        globals.ckpt = ckpt
        banner = "ckpt = " .. ckpt:summary()
          .. "\n  ckpt:tree(prefix), ckpt[name], ckpt:stats(pattern), ckpt:diff(other)"
      end
    end)
    if not ok then
      io.stderr:write("bvlua repl: ", tostring(err), "\n")
      return 1
    end
  end
  M.start({globals = globals, banner = banner})
  return 0
end

return M
