-- bv.preflight: what `bvlua train --dry-run` checks without training, and `bvlua sweep` for each
-- job: every problem of a resolved config at once, each naming its config key, so that a typo is
-- found in a second, not when a data worker starts or at the first evaluation hours in.
--
--   local problems, notes = preflight.problems("configs/x.lua:arg", cfg)
--
-- Checked: the pp strings parse and name known ops (after the config's register_pp_ops), the
-- evaluators' types exist, the data files and directories exist, the model's name and options
-- (parsed as the trainer builds the model; no weights are made), model_init's files, the
-- optimizer and its schedule (warmup shorter than the run, a known decay type) and that the
-- number of steps can be computed. A key the trainer requires but the config leaves out is the
-- trainer's to say (model_name, optax_name, lr), except the run's length. Nothing is drawn,
-- written or allocated.
local chrono = require "bv.chrono"
local config = require "bv.config"
local config_keys = require "bv.config_keys"
local evaluators = require "bv.evaluators"
local json = require "bv.json"
local lines = require "bv.lines"

local M = {}

local BUILT_IN_TRAINERS = {classification = true, ["proj.paligemma.train"] = true}

-- An error's text without the "file:line: " that error(msg, 2) and native functions put first.
local function message(err)
  return (tostring(err):gsub("^[^\n:]+:%d+: ", ""))
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

local function evals_of(cfg)
  return type(cfg.evals) == "table" and cfg.evals or {}
end

-- The config's pp strings that fail bv.pp.check, as "KEY: error" (the training data's, each
-- mixture dataset's, each evaluator's pp and pp_fn), in a stable order. The config's own ops
-- must be registered first (config.register_pp_ops).
function M.pp_problems(cfg)
  local out = {}
  local function check(key, spec)
    if type(spec) ~= "string" then return end
    local ok, err = pcall(bv.pp.check, spec)
    if not ok then out[#out + 1] = key .. ": " .. tostring(err) end
  end
  local input = type(cfg.input) == "table" and cfg.input or {}
  check("input.pp", input.pp)
  if type(input.data) == "table" and input.data.name == nil then
    for _, name in ipairs(sorted_keys(input.data)) do
      if type(input[name]) == "table" then check("input." .. name .. ".pp", input[name].pp) end
    end
  end
  local evals = evals_of(cfg)
  for _, name in ipairs(sorted_keys(evals)) do
    for _, key in ipairs({"pp", "pp_fn"}) do  -- (big_vision's evaluators say pp_fn)
      if type(evals[name]) == "table" then
        check("evals." .. tostring(name) .. "." .. key, evals[name][key])
      end
    end
  end
  return out
end

local function evaluator_problems(cfg, out)
  local evals = evals_of(cfg)
  for _, name in ipairs(sorted_keys(evals)) do
    local key, e = "evals." .. tostring(name), evals[name]
    if type(e) ~= "table" then
      out[#out + 1] = key .. ": must be a table ({type = ..., data = ..., pp = ...})"
    else
      local ok, err = pcall(evaluators.get, e.type or name)
      if not ok then out[#out + 1] = key .. (e.type and ".type" or "") .. ": " .. message(err) end
    end
  end
end

-- {key = "input.data" | "input.NAME.data" | "evals.NAME.data", data = table}: the data configs
-- the run reads, the training data's first.
local function data_configs(cfg)
  local out = {}
  local input = type(cfg.input) == "table" and cfg.input or {}
  if type(input.data) == "table" and type(input.data.name) == "string" then
    out[1] = {key = "input.data", data = input.data, train = true}
  elseif type(input.data) == "table" then
    for _, name in ipairs(sorted_keys(input.data)) do
      local sub = input[name]
      if type(sub) == "table" and type(sub.data) == "table" then
        out[#out + 1] = {key = "input." .. name .. ".data", data = sub.data, train = true,
                         weight = input.data[name]}
      end
    end
  end
  local evals = evals_of(cfg)
  for _, name in ipairs(sorted_keys(evals)) do
    local e = evals[name]
    if type(e) == "table" and type(e.data) == "table" then
      out[#out + 1] = {key = "evals." .. tostring(name) .. ".data", data = e.data}
    end
  end
  return out
end

-- The data files and directories; a missing one the config's prepare makes is a note. Returns
-- the training examples (nil when unknown: a file missing or unreadable).
local function data_problems(cfg, prepare, out, notes)
  local draws_lines = prepare ~= nil and prepare == lines.prepare  -- we know what it makes
  local plan = draws_lines and lines.plan(cfg)
  if plan and plan.refused then out[#out + 1] = plan.refused end
  local drawn = plan and plan.dir .. "/"
  local ntrain, prepared = 0, false
  for _, d in ipairs(data_configs(cfg)) do
    local ok, err = pcall(bv.data.check_path, d.data, d.key)
    local path = d.data.fname or d.data.root
    if not ok and drawn and type(path) == "string" and path:sub(1, #drawn) == drawn then
      if not plan.refused and not prepared then
        notes[#notes + 1] = string.format("%s: %s is not there yet: bvlua train draws the lines "
          .. "data set (%s) into %s first (the config's prepare)", d.key, path, lines.DRAW_SIZE,
          plan.dir)
      end
      prepared = true
    elseif not ok and prepare and not draws_lines then
      notes[#notes + 1] = string.format("%s: %s is not there yet; the config's prepare, which "
        .. "bvlua train runs first, may make it", d.key, tostring(path))
    elseif not ok then
      out[#out + 1] = message(err)
    else
      local keys = type(d.data.fopen_keys) == "table" and d.data.fopen_keys or {}
      for _, k in ipairs(sorted_keys(keys)) do
        local dir = keys[k]
        if type(dir) == "string" and not bv.fs.is_dir(dir) then
          out[#out + 1] = string.format("%s.fopen_keys.%s: no such directory '%s'", d.key, k,
                                        bv.snippet(dir))
        end
      end
    end
    if d.train and ntrain then
      local size_ok, src = false, nil
      if ok then size_ok, src = pcall(bv.data.source, d.data, {where = d.key}) end
      if not size_ok then
        if ok then out[#out + 1] = message(src) end
        ntrain = nil
      elseif not (type(d.weight) == "number" and d.weight <= 0) then  -- weight 0: not read
        ntrain = ntrain + src:size()
      end
    end
  end
  if not (type(cfg.input) == "table" and type(cfg.input.data) == "table") then return nil end
  return ntrain
end

local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

-- The model, built as the trainer builds it: the options parsed and the parameters' shapes
-- worked out, no weights made.
local function model_problems(cfg, trainer, out)
  local name, model_cfg = cfg.model_name, copy(type(cfg.model) == "table" and cfg.model or {})
  if trainer == "proj.paligemma.train" then
    name = name or "proj.paligemma.paligemma"
  elseif trainer == "classification" then
    model_cfg.num_classes = cfg.num_classes
    local refused = bv.models.classification_refusal(name)
    if refused then
      out[#out + 1] = "model_name: " .. refused
      return
    end
  elseif type(name) == "string" then  -- a trainer of the user's own builds it its own way
    local ok, err = pcall(bv.models.doc, name)
    if not ok then out[#out + 1] = "model_name: " .. message(err) end
    return
  end
  if type(name) ~= "string" then return end
  local ok, err = pcall(bv.models.build, name, model_cfg)
  if not ok then
    err = message(err)
    out[#out + 1] = (err:find("^unknown model") and "model_name: " or "model: ") .. err
  end
end

-- The file behind one model_init ("path.npz", "path.npz:sub/tree", a vanity name such as
-- pt_224 under $BV_GEMMA_DIR), as bv.models reads it.
local function init_problem(key, init)
  if type(init) ~= "string" then
    return string.format("%s: must be a path, got a %s", key, type(init))
  end
  local ok, path = pcall(require("bv.models").init_file, init)
  if not ok then return key .. ": " .. message(path):gsub("^model_init ", "") end
  if bv.fs.exists(path) then return nil end
  return string.format("%s: no such file %s%s", key, bv.snippet(path),
    path:sub(1, 1) == "/" and "" or " (relative to the current directory, " .. bv.fs.cwd() .. ")")
end

-- makes: the files the config's check accounts for (its prepare writes them, or its own
-- problem explains their absence).
local function model_init_problems(cfg, makes, out)
  local function problem(key, init)
    local path = type(init) == "string" and (init:match("^(.*%.npz):[^/:][^:]*$") or init)
    if path and makes[path] then return nil end
    return init_problem(key, init)
  end
  local init = cfg.model_init
  if type(init) == "table" then
    for _, part in ipairs(sorted_keys(init)) do
      out[#out + 1] = problem("model_init." .. tostring(part), init[part])
    end
  elseif init ~= nil then
    out[#out + 1] = problem("model_init", init)
  end
end

-- A pp that tokenizes with gemma(...) needs the tokenizer's model file, which no prepare makes.
local function tokenizer_problems(cfg, out)
  if not require("bv.paligemma").uses_gemma(cfg) then return end
  local ok, err = pcall(bv.text.gemma_model_path)
  if not ok then out[#out + 1] = "pp: its gemma(...) tokenizer: " .. message(err) end
end

-- The run's length and the other durations, and the optimizer with its schedules (built for no
-- parameters: nothing is allocated). ntrain nil: the data is not there yet, so what needs its
-- size is left to bvlua train (a note).
local function steps_problems(cfg, ntrain, out, notes)
  local input = type(cfg.input) == "table" and cfg.input or {}
  local batch = input.batch_size
  if input.data ~= nil and (math.type(batch) ~= "integer" or batch < 1) then
    out[#out + 1] = "input.batch_size: must be a positive integer, got "
                    .. bv.snippet(tostring(batch))
    batch = nil
  end
  local total
  if ntrain or cfg.total_epochs == nil then
    local ok, n = pcall(chrono.steps, "total", cfg, ntrain, batch)
    if ok then total = n else out[#out + 1] = message(n) end
  else
    notes[#notes + 1] = "total_epochs: the steps are counted once the training data is there"
  end
  if total then
    for _, prefix in ipairs({"log_training", "ckpt", "keep_ckpt"}) do
      local ok, err = pcall(chrono.steps, prefix, cfg, ntrain, batch, total, 0)
      if not ok and not (ntrain == nil and tostring(err):find("data_size", 1, true)) then
        out[#out + 1] = message(err)
      end
    end
  end
  local c = copy(cfg)
  if c.optax_name == nil or c.lr == nil then
    -- Left out: the trainer says so. The schedule is checked with a stand-in optimizer.
    if c.optax_name == nil then c.optax = nil end
    c.optax_name, c.lr = c.optax_name or "big_vision.sgd", c.lr or 1.0
  end
  local sizes = {total_steps = total or 0, batch_size = batch or 0, data_size = ntrain or 0}
  local ok, err = pcall(bv.optim.new, json.encode(c, {what = "config"}), {}, sizes)
  err = not ok and message(err)
  if err and not (ntrain == nil and err:find("data_size", 1, true))
     and not (total == nil and err:find("total_steps", 1, true)) then
    out[#out + 1] = err
  end
  if total then
    notes[#notes + 1] = string.format("%d training steps%s", total, ntrain and batch
      and string.format(" (%g epochs of %d examples, %d a batch)", total * batch / ntrain, ntrain,
                        batch) or "")
  end
end

-- Every problem of `cfg`, the config that `spec` ("path.lua[:ARGS]", or nil: no config file)
-- gives with the overrides applied (bv.null entries allowed), as a list of strings that each
-- name their config key; and a list of notes (what bvlua train will do first, the number of
-- steps). An empty list: nothing found. Runs the config's register_pp_ops in this Lua state.
function M.problems(spec, cfg)
  cfg = config_keys.without_nulls(cfg)
  local out, notes = {}, {}
  local prepare
  local makes = {}  -- path -> true: files the config's prepare makes (its check says which)
  if spec then
    local ok, err = pcall(config.register_pp_ops, spec)
    if not ok then out[#out + 1] = "register_pp_ops: " .. message(err) end
    local mok, module = pcall(config.module, spec)
    prepare = mok and module.prepare or nil
    local cok, problems, check_notes, made = pcall(config.check, spec, cfg)
    if not cok then
      out[#out + 1] = "check: " .. message(problems)
    else
      for _, p in ipairs(problems) do out[#out + 1] = p end
      for _, n in ipairs(check_notes) do notes[#notes + 1] = n end
      for _, path in ipairs(made) do makes[path] = true end
    end
  end
  for _, p in ipairs(M.pp_problems(cfg)) do out[#out + 1] = p end
  evaluator_problems(cfg, out)
  local ntrain = data_problems(cfg, prepare, out, notes)
  local trainer = cfg.trainer or "classification"
  model_problems(cfg, BUILT_IN_TRAINERS[trainer] and trainer or nil, out)
  model_init_problems(cfg, makes, out)
  tokenizer_problems(cfg, out)
  if BUILT_IN_TRAINERS[trainer] then steps_problems(cfg, ntrain, out, notes) end
  return out, notes
end

return M
