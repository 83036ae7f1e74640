-- bv.evaluators: big_vision's evaluators (evaluators/common.py): a registry of evaluator types
-- and from_config, which builds the evaluators named in a config's `evals` section.
--
--   local evaluators = require "bv.evaluators"
--   for _, e in ipairs(evaluators.from_config(config, {predict = predict_fn}, get_steps)) do
--     for _, kv in ipairs(e.evaluator:run(params)) do mw:measure(e.prefix .. kv[1], kv[2]) end
--   end
--
-- An evaluator type is a module table with new(predict_fn, cfg) returning an object whose
-- :run(params) returns an ordered list of {key, value} pairs. Types are found by name:
-- evaluators.register(name, module), else the Lua module bv.evaluators.<name> (big_vision's
-- dotted names map to folders: "proj.paligemma.perplexity" is
-- lib/bv/evaluators/proj/paligemma/perplexity.lua).
--
-- Predict functions are called predict_fn(params, batch, kw): kw is a table of keyword
-- arguments (big_vision's **kwargs), holding an eval's `pred_kw` merged under the caller's.
local data = require "bv.data"
local json = require "bv.json"
local suggest = require "bv.suggest"

local M = {}

local registry = {}

-- The keys every evaluator's config has (taken off by from_config), and those of its input
-- pipeline (M.input_pipeline); each type declares its own and includes these (bv.config_keys).
local config_keys = require "bv.config_keys"
local eval_keys = {
  {"type", "string", nil, "the evaluator type (default: the eval's name)"},
  {"pred", "string", "predict", "which of the trainer's predict functions it calls"},
  {"pred_kw", "table", nil, "keyword arguments bound to the predict function"},
  {"prefix", "string", nil, "its metrics' prefix (default: \"NAME/\")"},
  {"skip_first", "bool", false, "no evaluation at step 0"},
}
for _, u in ipairs({{"steps", "int"}, {"examples", "int"}, {"epochs", "float"},
                    {"percent", "float"}}) do
  eval_keys[#eval_keys + 1] = {"log_" .. u[1], u[2], nil, "how often it runs, in " .. u[1]
                               .. "; only one log_* may be set", duration = "log"}
end
config_keys.declare("evaluator", {doc = "what every evaluator's config has", keys = eval_keys})
config_keys.declare("eval_input", {doc = "an evaluator's input pipeline", keys = {
  {"data", "table", nil, "the source config: {name = \"bv:jsonl\", fname = ...}",
   scope = function(d) return d and type(d.name) == "string" and "data:" .. d.name or nil end},
  {"pp_fn", "string", nil, "the pp string (big_vision's name; or pp)"},
  {"pp", "string", "", "the pp string"},
  {"batch_size", "int", nil, "default: config.batch_size_eval, then config.input.batch_size"},
  {"workers", "int", nil, "data worker threads (default: bv.threads())"},
  {"cache", "string", nil, "none, pipeline, raw_data or final_data: accepted, no effect"},
  {"prefetch", "int", nil, "accepted, no effect"},
  {"keep_on_cpu", "list", nil, "accepted, no effect"},
  {"warmup", "bool", nil, "accepted, no effect"},
  {"devices", "list", nil, "accepted, no effect"},
}})

-- Makes `module` (a table with new(predict_fn, cfg)) the evaluator type `type_name`; an
-- existing registration of that name is replaced.
function M.register(type_name, module)
  if type(type_name) ~= "string" or type_name == "" then
    error("evaluators.register: the type name must be a non-empty string", 2)
  end
  if type(module) ~= "table" or type(module.new) ~= "function" then
    error("evaluators.register: evaluator type '" .. type_name
      .. "' must be a table with a new(predict_fn, cfg) function", 2)
  end
  registry[type_name] = module
end

-- The module of an evaluator type: a registered one, else bv.evaluators.<type_name>.
function M.get(type_name)
  if registry[type_name] then return registry[type_name] end
  local modname = "bv.evaluators." .. type_name
  if type_name:find("^[%w_]+[%w_.]*$") and package.searchpath(modname, package.path) then
    local module = require(modname)
    M.register(type_name, module)
    return module
  end
  local known = M.types()
  error(string.format("evaluators: unknown evaluator type '%s'%s; the types are: %s",
                      type_name, suggest.did_you_mean(type_name, known), table.concat(known, ", ")), 2)
end

-- Every evaluator type's name, sorted: the registered ones and the modules under
-- bv/evaluators/ on package.path ("classification", "proj.paligemma.transfers.vqa", ...).
function M.types()
  local seen, known = {}, {}
  local function add(name)
    if not seen[name] then seen[name], known[#known + 1] = true, name end
  end
  for name in pairs(registry) do add(name) end
  local init = package.searchpath("bv.evaluators", package.path)
  local function walk(dir, prefix)
    for _, entry in ipairs(bv.fs.list(dir)) do
      local path = dir .. "/" .. entry
      if bv.fs.is_dir(path) then
        walk(path, prefix .. entry .. ".")
      elseif entry:find("%.lua$") and entry ~= "init.lua" then
        add(prefix .. entry:sub(1, -5))
      end
    end
  end
  if init then walk(init:match("^(.*)/init%.lua$"), "") end
  table.sort(known)
  return known
end

-- A deep copy of a config table (tensors and functions are shared), so building evaluators
-- never changes the config.
local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return setmetatable(out, getmetatable(v))
end
M.copy = copy

-- Removes and returns cfg[key].
local function pop(cfg, key, default)
  local v = cfg[key]
  cfg[key] = nil
  if v == nil then return default end
  return v
end
M.pop = pop

-- Python truthiness for config values: nil, false, 0 and "" are not set.
local function set(v)
  return v ~= nil and v ~= false and v ~= 0 and v ~= ""
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

-- predict_fn with pred_kw bound (big_vision's partial): the caller's kw win over pred_kw.
local function bind_kw(fn, pred_kw)
  return function(params, batch, kw)
    local merged = copy(pred_kw)
    for k, v in pairs(kw or {}) do merged[k] = v end
    return fn(params, batch, merged)
  end
end

-- Builds config.evals: a list of {name, evaluator, log_steps, prefix, skip_first} sorted by
-- name (big_vision keeps the config's insertion order, which Lua tables don't have).
--
-- Per eval these keys are taken off its config: type (default: the eval's name), pred (the
-- key in predict_fns, default "predict"), pred_kw (bound to the predict function), prefix
-- (default "<name>/"), skip_first, and log_steps/log_epochs/log_examples/log_percent, turned
-- into steps by get_steps("log", eval_cfg) (the trainer's duration function; nil when no log_*
-- key is set; without get_steps, log_steps as given). batch_size defaults to
-- config.batch_size_eval, then config.input.batch_size, then config.batch_size. What remains
-- goes to the type's new(predict_fn, cfg).
function M.from_config(config, predict_fns, get_steps)
  if type(config) ~= "table" then error("evaluators.from_config: config must be a table", 2) end
  if type(predict_fns) ~= "table" then
    error("evaluators.from_config: predict_fns must be a table of name -> function", 2)
  end
  get_steps = get_steps or function(_, cfg) return cfg.log_steps end
  local evals = config.evals or {}
  if type(evals) ~= "table" then
    error("evaluators.from_config: config.evals must be a table", 2)
  end
  local out = {}
  for _, name in ipairs(sorted_keys(evals)) do
    local where = "evals." .. tostring(name)
    if type(evals[name]) ~= "table" then error(where .. " must be a table", 2) end
    local cfg = copy(evals[name])
    local type_name = pop(cfg, "type", name)
    local pred_key = pop(cfg, "pred", "predict")
    local pred_kw = pop(cfg, "pred_kw")
    local prefix = pop(cfg, "prefix", name .. "/")
    local skip_first = pop(cfg, "skip_first", false)
    local log_steps = get_steps("log", cfg)
    for _, unit in ipairs({"steps", "epochs", "examples", "percent"}) do
      cfg["log_" .. unit] = nil
    end

    local input = type(config.input) == "table" and config.input or {}
    if not set(cfg.batch_size) then
      cfg.batch_size = set(config.batch_size_eval) and config.batch_size_eval
        or set(input.batch_size) and input.batch_size
        or config.batch_size
    end
    -- The training input's pixel cap holds for the evaluators' images too.
    cfg._max_pixels = set(input.max_pixels) and input.max_pixels or nil

    local predict_fn = predict_fns[pred_key]
    if predict_fn == nil then
      error(string.format("%s: unknown predict_fn '%s'. Available predict_fns are:\n%s", where,
                          tostring(pred_key), table.concat(sorted_keys(predict_fns), "\n")), 2)
    end
    if pred_kw ~= nil then
      if type(pred_kw) ~= "table" then error(where .. ".pred_kw must be a table", 2) end
      predict_fn = bind_kw(predict_fn, pred_kw)
    end

    local module = M.get(type_name)
    local ok, evaluator = pcall(module.new, predict_fn, cfg)
    if not ok then error(string.format("%s (type %s): %s", where, type_name, evaluator), 2) end
    out[#out + 1] = {name = name, evaluator = evaluator, log_steps = log_steps, prefix = prefix,
                     skip_first = skip_first and true or false}
  end
  return out
end

-- The input pipeline keys every evaluator accepts (big_vision's eval_input_pipeline), taken off
-- cfg. Returns a function make_iter([part]) making a fresh inference iterator (and the example
-- count) on each call: the pipeline is rebuilt on every run.
--   data         the data source config (bv:jsonl, bv:imagefolder)
--   pp_fn / pp   the pp string (big_vision calls it pp_fn; bvlua's configs say pp)
--   batch_size   examples per batch (the last one padded, with `_mask`)
--   workers      data worker threads (default bv.threads())
--   _config_file the run's config (path[:arg]), whose register_pp_ops the workers run so its
--                inline ops exist there
--   _device      the training device, when not the CPU: batches are stacked in pinned memory
--                and copied there ahead (bv.data.prefetch_to)
--   _max_pixels  input.max_pixels, when the config sets it (from_config): the evaluators'
--                images have the training input's pixel cap
--   cache, prefetch, keep_on_cpu, warmup: big_vision's, accepted and without effect here (no
--                caching across runs, the pipeline prefetches on its own, labels stay on the host)
-- Keys left in cfg afterwards are an error naming them.
local CACHE = {none = true, pipeline = true, raw_data = true, final_data = true}

function M.input_pipeline(cfg, what)
  local d = pop(cfg, "data")
  local pp_fn, pp = pop(cfg, "pp_fn"), pop(cfg, "pp")
  local batch_size = pop(cfg, "batch_size")
  local workers = pop(cfg, "workers")
  local config_file = pop(cfg, "_config_file")
  local device = pop(cfg, "_device")
  local max_pixels = pop(cfg, "_max_pixels")
  local cache = pop(cfg, "cache")
  for _, k in ipairs({"prefetch", "keep_on_cpu", "warmup", "devices"}) do cfg[k] = nil end
  if type(d) ~= "table" then error(what .. ": needs a 'data' table (the source config)", 3) end
  if pp_fn ~= nil and pp ~= nil then error(what .. ": give pp_fn or pp, not both", 3) end
  pp = pp_fn or pp or ""
  if type(pp) ~= "string" then error(what .. ": pp_fn must be a pp string", 3) end
  if math.type(batch_size) ~= "integer" or batch_size < 1 then
    error(what .. ": batch_size must be a positive integer (set it, batch_size_eval or "
      .. "input.batch_size), got " .. tostring(batch_size), 3)
  end
  if cache ~= nil and not CACHE[cache] then
    error(what .. ": cache must be none, pipeline, raw_data or final_data, got "
      .. tostring(cache), 3)
  end
  local left = sorted_keys(cfg)
  if #left > 0 then
    error(string.format("%s: unexpected config keys: %s", what, table.concat(left, ", ")), 3)
  end
  -- part = {rank =, world =}: this process's part of the split (evaluators that combine their
  -- sums over ranks); nil: the whole split.
  local on_device = device and device ~= "cpu"
  return function(part)
    local it, n = data.inference({data = d, pp = pp, batch_size = batch_size,
                                  max_pixels = max_pixels},
                                 {workers = workers, config = config_file,
                                  rank = part and part.rank, world = part and part.world,
                                  pin_memory = on_device, max_pixels_key = "input.max_pixels",
                                  batch_size_key = what .. "'s batch_size (evals.NAME.batch_size, "
                                    .. "else batch_size_eval, else input.batch_size)"})
    if on_device then it = data.prefetch_to(it, device) end
    return it, n
  end
end

-- Per-example records (an evaluator's outfile) from every rank: with several processes
-- (ctx.gather) each rank's part, in data order, on rank 0; else `records` as they are.
function M.gather_records(records, ctx)
  if not (ctx and ctx.gather) then return records end
  local parts = ctx.gather(json.encode(records))
  if not parts then return records end  -- not rank 0: it writes nothing
  local all = {}
  for _, part in ipairs(parts) do
    for _, rec in ipairs(json.decode(part)) do all[#all + 1] = rec end
  end
  return all
end

-- Writes `records` as a JSON list to `template` with {workdir}, {step} and the `fields` given
-- (e.g. {split = "val"}) filled in; rank 0 alone writes (ctx.write ~= false).
function M.write_records(template, records, ctx, fields)
  if ctx and ctx.write == false then return end
  local values = {workdir = ctx and ctx.workdir or ".", step = tostring(ctx and ctx.step or 0)}
  for k, v in pairs(fields or {}) do values[k] = v end
  local path = template:gsub("{(%w+)}", values)
  local dir = path:match("^(.*)/[^/]*$")
  if dir then bv.fs.mkdirs(dir) end
  bv.fs.write_file(path, json.encode(records) .. "\n")
end

return M
