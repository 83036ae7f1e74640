-- bv.trainers.utils: what the trainers share around their training step, as big_vision's
-- utils.py is for its trainers. Each trainer keeps its own loop (big_vision's habit), so that a
-- step reads there in a handful of lines: the batch, loss and gradients, the update, the NaN
-- guard, the log, then checkpoints and evals. The loop, as the trainers write it:
--
--   local state = utils.start(config, workdir, run)   -- processes, clock, metrics file, data
--   ... model, params = model:init(seed) ...
--   local opt = utils.optimizer(state, model)
--   params = utils.resume_or_init(state, model, params, opt)
--   utils.evaluators(state, predict_fns)
--   utils.initial_evals(state, params)
--   for step = state.first_step + 1, state.total_steps do
--     local batch = utils.step_start(state, step)
--     local loss, grads = shard:gradients(params, function(p)
--       return model:loss_and_grads(p, batch, opts) end)
--     local log_now = utils.log_now(state, step)
--     local m = opt:update(shard:owned(params), grads, {norms = log_now})
--     shard:sync_params(params)
--     if log_now then utils.log_training(state, step, loss, m) end  -- reads loss: NaN guard
--     local stopped = utils.end_of_step(state, step, params, loss)
--     if stopped then return stopped end
--   end
--   utils.finish(state)
--
-- The trainer state: one table, made by start, that every function here takes first. Its
-- fields (start sets those down to the durations; the others, the function named):
--   config, workdir, run   the trainer's arguments; run = {config_file, device, group,
--                          stop_after, profile = {start, stop}}, and run.state is what
--                          `bvlua train --debug` shows when a step fails
--   shard, rank, world     bv.sharding: how the run spreads over processes
--   device                 what this process trains on ("cpu", "cuda:0"; run.device, from
--                          bv.device): parameters and batches go there (to_device)
--   progress, mw, chrono   the progress line, the metrics writer, the clock (a bv.chrono Chrono)
--   checkpoint             the checkpoint to resume from (bv.ckpt.load), or nil
--   saved_step             the step of the last checkpoint on disk (what a second Ctrl-C keeps),
--                          or nil
--   train_iter, ntrain, batch_size, total_steps    the training data and how long to train
--   skip_errors            whether the training data skips bad examples (input.skip_errors, or
--                          a mixture dataset's): log_training and finish count them
--   first_batch            the first batch: it tells the model the image size; step_start hands
--                          it out at the first step
--   next_batch, data_position   the next step's batch on its way to the device (step_start),
--                          and the data position after the batch being trained on (checkpoints
--                          save it: the batch read ahead is read again on resuming)
--   log_every, ckpt_every, keep_every              durations in steps (bv.chrono.steps)
--   opt, full_spec         this rank's optimizer, the whole one's state_spec (optimizer)
--   first_step             0, or the step of the checkpoint resumed from (resume_or_init)
--   checkpoint_extras      name -> object with state() and set_state(tensor) that checkpoints
--                          hold besides params and opt, e.g. mixup's rng (resume_or_init)
--   evals                  the evaluators of config.evals (evaluators)
--   last_checked           the last step the NaN guard passed (check_finite)
--   logged_step, logged_loss   the last step whose training metrics were logged, and its loss
--                          (log_training); the progress line shows that loss
--   profiling, profiled    the first step of the --profile window being recorded; whether
--                          it has been written (step_start, end_of_step)
local attach = require "bv.attach"
local chrono = require "bv.chrono"
local data = require "bv.data"
local evaluators = require "bv.evaluators"
local json = require "bv.json"
local log = require "bv.log"
local metrics = require "bv.metrics"
local profile = require "bv.profile"
local progress = require "bv.progress"
local sharding = require "bv.sharding"
local config_keys = require "bv.config_keys"

local M = {}

-- The config keys every trainer reads (here, in bv.sharding, in bv.data and in the native
-- optimizer, which gets the whole config): see bv.config_keys.
local function durations(prefix, what, out)
  for _, u in ipairs({{"steps", "int"}, {"examples", "int"}, {"epochs", "float"},
                      {"percent", "float"}}) do
    if not (prefix == "total" and u[1] == "percent") then
      out[#out + 1] = {prefix .. "_" .. u[1], u[2], nil, what .. ", in " .. u[1]
                       .. (u[1] == "percent" and " of total_steps (0..1)" or "")
                       .. "; only one " .. prefix .. "_* may be set", duration = prefix}
    end
  end
  return out
end

local function optax_scope(_, cfg) return cfg.optax_name and "optax:" .. cfg.optax_name end

local function schedule_scope(s)
  if s and s[1] == nil then return "schedule:" .. tostring(s.decay_type or "stair") end
end

local function data_scope(d)
  if d and type(d.name) == "string" then return "data:" .. d.name end
end

local function eval_scope(entry, name) return "evaluator:" .. tostring(entry and entry.type or name) end

local TRAINER_KEYS = durations("total", "how long to train", {})
for _, k in ipairs({
  {"input", "table", nil, "the training data: data, pp, batch_size, ...", scope = "input"},
  {"seed", "int", 0, "seeds the parameters' init, the data order and mixup"},
  {"lr", "float", nil, "the learning rate (required), the peak of the schedule"},
  {"wd", "float", 0, "decoupled weight decay, times lr and the schedule"},
  {"wd_mults", "list", {{".*/kernel$", 1.0}}, "{regex, mult} pairs: which params decay, how much"},
  {"lr_mults", "list", nil, "{regex, mult} pairs multiplying the learning rate of matching params"},
  {"schedule", "table|list", {}, "one schedule (decay_type, warmup_steps, ...), or a list of "
    .. "{regex, schedule} pairs; bv.null as a pair's schedule freezes what it matches",
    scope = schedule_scope,
    items = function(item)
      local s = type(item) == "table" and item[2]
      if type(s) == "table" and s ~= require("bv.literal").null and s[1] == nil then
        return s, schedule_scope(s)
      end
    end},
  {"optax_name", "string", nil, "the optimizer (required): big_vision.scale_by_adafactor, "
    .. "scale_by_adam, big_vision.momentum_hp, big_vision.sgd, scale"},
  {"optax", "table", {}, "the optimizer's options (see optax:NAME)", scope = optax_scope},
  {"grad_clip_norm", "float", nil, "clips the gradients' global norm to this"},
  {"weight_decay_decouple", "bool", true, "false (coupled weight decay) is refused"},
  {"grad_clip_per_example", "bool", false, "true is refused (not supported)"},
  {"model_init", "string|table", nil, "parameters to start from: a checkpoint path, a vanity "
    .. "name (paligemma: pt_224), or {part = path}"},
  {"model_load", "table", nil, "options of model:load for model_init (e.g. dont_load regexes)"},
  {"evals", "table", {}, "the evaluators, by name: evals.NAME = {type = ..., ...}",
    each = eval_scope},
  {"batch_size_eval", "int", nil, "evaluators' batch size when theirs is not set"},
  {"batch_size", "int", nil, "evaluators' batch size when neither theirs, batch_size_eval "
    .. "nor input.batch_size is set"},
  {"accum_steps", "int", 1, "split each batch into this many passes (gradient accumulation)"},
  {"autocast", "string", nil, "\"bfloat16\": mixed-precision forward and backward (\"float16\" "
    .. "is refused: it needs loss scaling)"},
  {"matmul_precision", "string", "default", "float32 matmuls and convolutions on CUDA, by JAX's "
    .. "names: default and high allow TF32 (as big_vision on Ampere/Hopper), highest is full "
    .. "float32; the CPU's numbers never change"},
  {"deterministic", "bool", false, "CUDA picks deterministic kernels only, and an op that has "
    .. "none is an error naming it (torch.use_deterministic_algorithms); the CPU always is"},
  {"device", "string", "auto", "what to train on: auto, cpu, cuda, cuda:N (--device wins)"},
  {"attach", "bool", true, "rank 0 listens for `bvlua attach WORKDIR` (a prompt inside the "
    .. "running run) on WORKDIR/.bvlua.attach, a socket only this user may use; false (or "
    .. "`bvlua train --no-attach`): no listener"},
  {"trainer", "string", "classification", "the trainer: classification, "
    .. "proj.paligemma.train, or a .lua file"},
  {"mesh", "list", {{"data", -1}}, "the device mesh: {{\"data\", -1}}, or {{\"replica\", R}, "
    .. "{\"data\", -1}} (hybrid: fsdp and zero1 shard within each data group of consecutive "
    .. "ranks and replicate across the replica axis)"},
  {"sharding_strategy", "list", {{".*", "replicate"}}, "{regex, strategy} pairs: replicate, "
    .. "fsdp(axis=\"data\"), zero1(axis=\"data\")"},
  {"sharding_rules", "list", nil, "accepted with big_vision's meaning on the data mesh"},
  {"sharding_overlap", "bool", true, "several processes: the replicated gradients' all-reduce "
    .. "starts during the backward, bucket by bucket (false: after it)"},
  {"sharding_reshard_after_forward", "bool", true, "fsdp with remat: a layer's fetched "
    .. "parameters go after its forward and are broadcast again for its recomputation (false: "
    .. "kept until then, one broadcast instead of two, the layers' parameters whole meanwhile)"},
  {"sharding_wire_dtype", "string", "float32", "\"bfloat16\": float32 values travel between "
    .. "processes as bfloat16 (half the bytes). fsdp: parameters go to the other processes and "
    .. "their gradients back to the owner as bfloat16; every process computes with the owner's "
    .. "value rounded to bfloat16, and the owner adds the bfloat16 sum of the gradients into its "
    .. "float32 gradient. replicate and zero1: each process's gradient is rounded to bfloat16, "
    .. "the sum travels as bfloat16 and the mean is taken in float32. Parameters, optimizer "
    .. "state, the loss and metrics stay float32"},
}) do TRAINER_KEYS[#TRAINER_KEYS + 1] = k end
durations("log_training", "how often to log training metrics", TRAINER_KEYS)
durations("ckpt", "how often to save a checkpoint (none without one of them)", TRAINER_KEYS)
durations("keep_ckpt", "how often a checkpoint is kept for good (default: the last)",
          TRAINER_KEYS)
config_keys.declare("trainer", {doc = "what every trainer reads", keys = TRAINER_KEYS})

-- What one dataset's pipeline reads: the top of `input`, or input.NAME in a mixture.
local PIPELINE_KEYS = {
  {"data", "table", nil, "the source: {name = \"bv:jsonl\", fname = ...} (a mixture: "
    .. "{name = weight, ...} with input.NAME for each)", scope = data_scope},
  {"pp", "string", "", "the preprocessing, a pp string"},
  {"shuffle_buffer_size", "int", nil, "examples shuffled together"},
  {"cache_raw", "bool", false, "keep the raw examples in memory"},
  {"skip_errors", "bool", false, "skip (and count) examples whose pp fails"},
}
config_keys.declare("input_dataset", {doc = "one dataset of a mixture", keys = PIPELINE_KEYS})
config_keys.declare("input", {doc = "the training data (config.input)",
  include = {"input_dataset"},
  keys = {
    {"batch_size", "int", nil, "examples per step, over all processes (required)"},
    {"prefetch", "int", 2, "batches prepared ahead"},
    {"max_pixels", "int", 89478485, "images over height * width pixels are refused from their "
      .. "header (bad examples; PIL's MAX_IMAGE_PIXELS)"},
  },
  -- A mixture's datasets: input.NAME for each NAME in input.data.
  dynamic = function(input, key)
    local d = input.data
    if type(d) == "table" and d.name == nil and d[key] ~= nil then return "input_dataset" end
  end})

-- The metrics file and its log lines (rank 0 writes and prints). Evaluator metrics (under the
-- prefixes that M.evaluators adds) and eval timings get lines of their own; the training
-- metrics are on the progress line.
--
-- The metrics file agrees with the checkpoints after any interruption: it holds each step's
-- line exactly once, for the steps up to the checkpoint the run resumes from. The rules:
--   * a step's line (its training metrics and the evaluations due at that step) is written and
--     fsynced before that step's checkpoint is published (end_of_step: NaN guard, evals, line,
--     checkpoint), so a checkpoint never exists without its line;
--   * resuming from the checkpoint of step S, the lines of steps after S (written by a run that
--     was interrupted before its next checkpoint, or abandoned for an older checkpoint) are
--     moved to big_vision_metrics.txt.dropped-N (agree_with_checkpoint), and the run writes them
--     again as it goes;
--   * starting from scratch in a workdir that already has a metrics file (no checkpoint: killed
--     before the first, or the checkpoints deleted), that file is moved to
--     big_vision_metrics.txt.before-N.
-- Only rank 0 writes, moves or truncates; nothing is ever deleted.
local function metrics_writer(workdir, rank)
  local prefixes = {}
  local mw = metrics.writer(workdir, {enabled = rank == 0, print = log.info, show = function(name)
    if name:find("^z/secs/eval/") then return true end
    for _, p in ipairs(prefixes) do
      if name:sub(1, #p) == p then return true end
    end
    return false
  end})
  mw.eval_prefixes = prefixes
  return mw
end

-- config.autocast, config.matmul_precision and config.deterministic: checked, and set (process-wide,
-- CUDA's flags only), before anything is read or built, so that a refused value fails at once.
function M.set_precision(config)
  local autocast = config.autocast
  if autocast == "float16" then
    error('config.autocast = "float16" needs loss scaling, which bvlua does not do: use '
          .. '"bfloat16" (float32\'s range, no scaling needed)', 0)
  elseif autocast ~= nil and autocast ~= "bfloat16" and autocast ~= "float32" then
    error(string.format('config.autocast: unknown dtype %q (use "bfloat16", or leave it unset '
                        .. 'for float32)', tostring(autocast)), 0)
  end
  local precision = config.matmul_precision or "default"
  if type(precision) ~= "string" then
    error("config.matmul_precision must be a string (\"default\", \"high\", \"highest\"), got "
          .. type(precision), 0)
  end
  bv.set_matmul_precision(precision)
  if config.deterministic ~= nil and type(config.deterministic) ~= "boolean" then
    error("config.deterministic must be true or false, got " .. tostring(config.deterministic), 0)
  end
  bv.set_deterministic(config.deterministic == true)
end

-- Everything a trainer needs before its model: the processes (bv.sharding), the clock, the
-- metrics file, the checkpoint to resume from, the training data from where that checkpoint
-- left off, and the durations. Returns the trainer state (above).
function M.start(config, workdir, run)
  run = run or {}
  M.set_precision(config)
  local shard = sharding.new(config, run.group, run.device)
  local state = {config = config, workdir = workdir, run = run, shard = shard,
                 rank = shard.rank, world = shard.world}
  -- stdout: notes and eval results as lines, training as one progress line (bv.progress).
  state.progress = progress.new()
  log.setup({rank = shard.rank, progress = state.progress})
  -- The device (bv.device, resolved by `bvlua train`): parameters, batches and the optimizer's
  -- state live there (M.to_device), and collectives take them there (bv.dist: NCCL on CUDA).
  state.device = run.device or "cpu"
  if shard.world > 1 then
    log.note("Training on %s (%d threads), rank %d of %d, collectives by %s", state.device,
             bv.threads(), shard.rank, shard.world, run.group:backend())
  else
    log.note("Training on %s (%d threads)", state.device, bv.threads())
  end
  if state.device:match("^cuda") then
    log.note("float32 matmuls on CUDA: %s (matmul_precision %s)",
             bv.tf32().cublas and "TF32" or "full float32", config.matmul_precision or "default")
  end
  -- The clock (program time starts here; run.clock: a function of seconds instead of bv.clock,
  -- for tests) and the memory it logs at log steps.
  state.chrono = chrono.new({clock = run.clock, memory = function(measure)
    chrono.log_memory(measure)  -- y/hostmem/*, as big_vision
    -- and the device's, as big_vision logs its first device's: y/devmem/dev0/<jax's name>
    for name, bytes in pairs(bv.memory(state.device)) do measure("y/devmem/dev0/" .. name, bytes) end
  end})

  bv.handle_stop_signals()  -- SIGTERM/SIGINT from now on: checkpoint at the next step and stop
  bv.fs.mkdirs(workdir)
  state.mw = metrics_writer(workdir, shard.rank)

  -- Resume first: the data must start where the checkpoint left off.
  -- Verified now, its tensors read later one at a time (resume_or_init): no rank ever holds the
  -- whole checkpoint in host memory.
  local checkpoint = bv.ckpt.load(workdir, {tensors = false})
  if checkpoint and checkpoint.warning then log.warn("%s", checkpoint.warning) end
  state.checkpoint = checkpoint
  -- A SIGINT/SIGTERM says at once what it will do and, a second SIGINT, what is kept
  -- (core/signals.h): on rank 0, the process whose output the user reads.
  state.saved_step = checkpoint and checkpoint.step or nil
  bv.stop_progress({announce = shard.rank == 0, saved = state.saved_step})
  if shard.rank == 0 then M.agree_with_checkpoint(workdir, checkpoint and checkpoint.step) end

  M.check_pp_strings(config, run.config_file)
  state.batch_size = config.input.batch_size
  state.train_iter, state.ntrain = bv.data.training(config.input, {
    seed = config.seed or 0, config = run.config_file, rank = shard.rank, world = shard.world,
    position = checkpoint and checkpoint.state.data_position or 0,
    pin_memory = state.device ~= "cpu"})  -- bound for a GPU: stacked where it copies from
  -- The evaluators' data files exist: said now, not at the first evaluation (hours in).
  for name, e in pairs(type(config.evals) == "table" and config.evals or {}) do
    if type(e) == "table" then bv.data.check_path(e.data, "evals." .. tostring(name) .. ".data") end
  end
  state.total_steps = chrono.steps("total", config, state.ntrain, state.batch_size)
  state.progress.total_steps = state.total_steps
  log.note("Running for %d steps, that means %f epochs", state.total_steps,
           state.total_steps * state.batch_size / state.ntrain)
  state.first_batch = state.train_iter:next()
  state.data_position = state.train_iter:position()
  state.skip_errors = M.skips_errors(config.input)

  local function steps(prefix, fallback)
    return chrono.steps(prefix, config, state.ntrain, state.batch_size, state.total_steps,
                        fallback)
  end
  state.log_every = steps("log_training")
  state.ckpt_every = steps("ckpt", 0)
  if state.ckpt_every == 0 then
    -- As big_vision: nothing is saved without a ckpt_* duration. Said now, not found out later.
    log.note("No checkpoints will be saved: to keep the parameters, set ckpt_steps, ckpt_epochs "
             .. "or ckpt_percent in the config")
  end
  state.keep_every = steps("keep_ckpt", 0)
  if state.keep_every == 0 and state.ckpt_every > 0 then state.keep_every = state.total_steps end
  M.stopped_before_start("while the data was opened", shard:stop_requested())  -- every rank
  return state
end

-- A SIGTERM or SIGINT before the first step (`bvlua train` has its handlers from the process's
-- start: core/signals.h): an error, so that nothing is trained or saved, and a workdir the run
-- made is removed again (bv.commands.train). `where`: what was going on; `stop`: the signal's
-- name (default: bv.stop_requested(), this process's).
function M.stopped_before_start(where, stop)
  if stop == nil then stop = bv.stop_requested() end
  if stop then
    error(string.format("%s received %s: stopped before the first step (nothing was trained "
                        .. "or saved)", stop, where), 0)
  end
end

-- The config's pp strings (training data, each dataset of a mixture, each evaluator) name ops
-- that exist, the config's own (its register_pp_ops, run here too) included: a typo is said
-- now, naming its key ("input.pp: pp: unknown op 'resise' ... (did you mean 'resize'?)"), not by
-- a data worker that fails to start. (bv.preflight lists them all for `bvlua train --dry-run`.)
function M.check_pp_strings(config, config_file)
  if config_file then require("bv.config").register_pp_ops(config_file) end
  local problems = require("bv.preflight").pp_problems(config)
  if problems[1] then error(problems[1], 0) end
end

-- Whether an input section skips bad examples: its own skip_errors, or a mixture dataset's.
function M.skips_errors(input)
  if input.skip_errors then return true end
  if type(input.data) == "table" and type(input.data.name) ~= "string" then
    for name in pairs(input.data) do
      if type(input[name]) == "table" and input[name].skip_errors then return true end
    end
  end
  return false
end

-- The examples skip_errors dropped so far, summed over processes (every rank calls it): the
-- total and {name = count} per dataset of a mixture (nil for one dataset).
local function skipped_counts(state)
  local by = state.train_iter:skipped_by_source()
  local names = {}
  for name in pairs(by) do names[#names + 1] = name end
  table.sort(names)
  local total, per = 0, {}
  for _, name in ipairs(names) do
    per[name] = math.tointeger(state.shard:sum(by[name])) or by[name]
    total = total + per[name]
  end
  return total, #names > 1 and per or nil, names
end

-- Makes WORKDIR's metrics file agree with the checkpoint the run resumes from (its step), or
-- with starting from scratch (step nil): see metrics_writer above. Says what it moved, where.
function M.agree_with_checkpoint(workdir, step)
  local path = workdir .. "/" .. metrics.FILE_NAME
  if not bv.fs.exists(path) then return end
  if step == nil then
    local aside = metrics.set_aside(path, "before")
    log.warn("starting from scratch, but %s already has %s from an earlier run (and no "
             .. "checkpoint to resume from): moved it to %s", workdir, metrics.FILE_NAME, aside)
    return
  end
  local r = metrics.truncate_after(path, step)
  if r.aside then
    log.note("Resuming from step %d: moved %d line(s) of %s that the checkpoint does not cover "
             .. "(later steps, or cut short) to %s; those steps are run again", step, r.dropped,
             metrics.FILE_NAME, r.aside)
  end
end

-- A model's parameters moved to the training device in place, one tensor at a time
-- (t:move_to_): a 3B model never has two full copies in host memory. Returns params.
function M.place_params(state, params)
  if state.device ~= "cpu" then
    for _, t in pairs(params) do t:move_to_(state.device) end
  end
  return params
end

-- A predict function run on the training device: the batch goes there (its copy was started
-- ahead by the evaluator's input pipeline: bv.data.prefetch_to), tensor results come back to
-- the host, where evaluators compute their metrics next to the batch's labels.
local function on_device(state, fn)
  if state.device == "cpu" then return fn end
  return function(params, batch, ...)
    local results = table.pack(fn(params, data.on_device(batch, state.device), ...))
    for i = 1, results.n do
      if bv.is_tensor(results[i]) then
        results[i] = results[i]:to("cpu")
      elseif type(results[i]) == "table" then
        for k, v in pairs(results[i]) do
          if bv.is_tensor(v) then results[i][k] = v:to("cpu") end
        end
      end
    end
    return table.unpack(results, 1, results.n)
  end
end

-- This rank's optimizer: big_vision's optax.make (schedules, freezing, clipping, lr_mults,
-- wd) over what this rank owns (bv.sharding plans that here; in one process, everything).
function M.optimizer(state, model)
  local sched = {total_steps = state.total_steps, batch_size = state.batch_size,
                 data_size = state.ntrain, device = state.device}  -- the state is made there
  state.opt, state.full_spec = sharding.make_optimizer(state.shard, json.encode(state.config),
                                                       model:param_shapes(), sched)
  return state.opt
end

-- Bytes of parameters and of optimizer state that rank 0 holds and that all ranks hold
-- together (fsdp: about 1/world each; zero1: the optimizer state only).
local function measure_memory(state, params, opt)
  local shard, mw = state.shard, state.mw
  local p, s = shard:param_bytes(params), sharding.state_bytes(opt)
  mw:measure("param_bytes", p)
  mw:measure("param_bytes_all", shard:sum(p))
  mw:measure("opt_state_bytes", s)
  mw:measure("opt_state_bytes_all", shard:sum(s))
end

-- big_vision's "resume or init": the checkpoint start found (params, optimizer state,
-- `checkpoint_extras`, the chrono), else config.model_init, else params as the model drew them.
-- Then the parameters go where training keeps them (model:relayout; fsdp: each rank keeps what
-- it owns). checkpoint_extras: name -> object with state() and set_state(tensor) that
-- checkpoints hold besides params and opt (the classification trainer's mixup rng).
-- Returns the params to train; sets state.first_step.
-- Frees a table of tensors now (a step's gradients once they are applied): their device memory
-- goes back at once instead of when Lua's collector reaches them.
function M.release(tensors)
  for _, t in pairs(tensors) do t:release() end
end

function M.resume_or_init(state, model, params, opt, checkpoint_extras)
  local config, shard, checkpoint = state.config, state.shard, state.checkpoint
  state.checkpoint_extras = checkpoint_extras or {}
  state.first_step = 0
  -- The model's fresh parameters go to the device first, one by one (no second host copy);
  -- what is loaded below is copied into them there.
  M.place_params(state, params)
  if checkpoint then
    -- One tensor at a time from the file: a parameter is read into host memory, copied into
    -- its placed tensor and dropped before the next is read; of the optimizer's state, this
    -- rank keeps only what it owns (bv.sharding).
    local file = bv.ckpt.open(checkpoint.path)
    local function tensor(name)
      if not file:info(name) then error("checkpoint " .. checkpoint.path .. " lacks " .. name, 0) end
      return file:load(name)
    end
    for name, t in pairs(params) do
      local saved <close> = tensor("params/" .. name)
      local want, got = t:shape(), saved:shape()
      if table.concat(want, "x") ~= table.concat(got, "x") then
        error(string.format("checkpoint %s: params/%s is [%s] but the model's is [%s]",
                            checkpoint.path, name, table.concat(got, "x"), table.concat(want, "x")), 0)
      end
      t:copy_(saved)
    end
    local spec = opt:state_spec()
    if not shard.sharded then  -- one process saved it: all its state must be this optimizer's
      local known = {count = true}
      for _, s in ipairs(spec) do known[s.name] = true end
      for _, e in ipairs(file:entries()) do
        local rest = e.name:match("^opt/(.*)$")
        if rest and not known[rest] then
          error(string.format("checkpoint %s: %s is not this optimizer's state (another "
                              .. "optimizer, or other parameters, saved it)", checkpoint.path,
                              e.name), 0)
        end
      end
    end
    for _, s in ipairs(spec) do
      if s.owned then
        local whole <close> = tensor("opt/" .. s.name)
        opt:load_state_tensor(s.name, shard:owned_opt_tensor(s, whole))
      end
    end
    opt:load_state_tensor("count", tensor("opt/count"))
    for name, extra in pairs(state.checkpoint_extras) do extra:set_state(tensor(name)) end
    state.chrono:load(checkpoint.state.chrono)
    state.first_step = checkpoint.step
    log.note("Resumed from %s at step %d", checkpoint.path, state.first_step)
  elseif config.model_init then
    local report
    params, report = model:load(params, config.model_init, config.model_load)
    log.note("Initialised %d parameters from %s", #report.loaded,
             type(config.model_init) == "string" and config.model_init or "parts")
  end
  -- What `bvlua attach` changed before the checkpoint (the learning-rate multiplier, ...).
  attach.restore(state, checkpoint and checkpoint.state.attach_changes or nil)
  state.attach_notes = checkpoint and checkpoint.state.attach_notes or nil
  model:relayout(params)  -- loaded tensors are row-major; the model may prefer another layout
  params = shard:hold(params)  -- fsdp: this rank keeps what it owns; the model reads placeholders
  measure_memory(state, params, opt)
  collectgarbage()  -- the state tensors measure_memory held (see save_checkpoint)
  state.last_checked = state.first_step

  state.chrono:inform({first_step = state.first_step, total_steps = state.total_steps,
                       global_bs = state.batch_size,
                       steps_per_epoch = state.ntrain / state.batch_size,
                       measure = function(k, v) state.mw:measure(k, v) end,
                       write_note = function() end})  -- its estimates are on the progress line
  -- Under fsdp, params holds placeholders (zeros); owned is what this rank keeps and updates.
  state.run.state = {config = config, model = model, params = params, opt = opt,
                     step = state.first_step, owned = shard:owned(params)}
  return params
end

-- The evaluators of config.evals; predict_fns: what they may call, by name (an eval's `pred`).
-- Evaluators get ctx = {workdir, step, write (rank 0 only), rank, world, and with several
-- processes sum(x) over ranks and gather(string) -> every rank's on rank 0; evaluators that use
-- them run their part of the split}.
function M.evaluators(state, predict_fns)
  local eval_config = evaluators.copy(state.config)
  -- Evaluators' data workers load the config file too, for ops it registers inline.
  for _, e in pairs(eval_config.evals or {}) do
    e._config_file = state.run.config_file
    e._device = state.device  -- batches pinned and copied to the device ahead
  end
  local function get_steps(prefix, cfg)
    local n = chrono.steps(prefix, cfg, state.ntrain, state.batch_size, state.total_steps, 0)
    return n > 0 and n or nil
  end
  local placed = {}
  for name, fn in pairs(predict_fns) do placed[name] = on_device(state, fn) end
  state.evals = evaluators.from_config(eval_config, placed, get_steps)
  for _, e in ipairs(state.evals) do table.insert(state.mw.eval_prefixes, e.prefix) end
  attach.restore(state)  -- the evaluators' log_steps that `bvlua attach` changed
  return state.evals
end

-- Runs evaluator `e` on params at `step` and logs its metrics, off the training clock (eval
-- time). As big_vision, the chrono ticks first: an eval step that is not a log step gets
-- examples_seen, epoch, core_hours and the rest too (a no-op at the initial evals).
-- in_session: run by `bvlua attach` (bv.attach), whose session has paused the clock already and
-- whose step was ticked. Returns the metrics measured, {name = value}.
local function run_eval(state, e, params, step, in_session)
  local shard = state.shard
  if not in_session then
    state.chrono:pause()
    state.chrono:tick(step)
  end
  -- Evaluators run whole models: fsdp parameters are gathered for them (a collective; every
  -- rank evaluates at the same steps), and dropped afterwards.
  params = shard:full_params(params)
  log.note("%s evaluation...", e.name)
  local ctx = {workdir = state.workdir, step = step, write = shard.rank == 0, rank = shard.rank,
               world = shard.world}
  if shard.world > 1 then
    ctx.sum = function(x) return shard:sum(x) end
    ctx.gather = function(s) return shard:gather_strings(s) end
  end
  local measured = {}
  state.chrono:log_timing("z/secs/eval/" .. e.name, function()
    for _, kv in ipairs(e.evaluator:run(params, ctx)) do
      measured[e.prefix .. kv[1]] = state.mw:measure(e.prefix .. kv[1], kv[2])
    end
  end)
  params = nil
  if shard.fsdp then collectgarbage() end
  if not in_session then state.chrono:resume("eval") end
  return measured
end

-- The initial evaluation, as big_vision's, at step 0 (evals with skip_first skip it).
-- Resuming a finished run (its checkpoint is at total_steps: a scheduler started it again after a
-- kill that came after its last save) trains and evaluates nothing, and leaves the metrics file
-- as it was: big_vision would evaluate again and log the last step a second time.
function M.initial_evals(state, params)
  local first_step = state.first_step
  if first_step == state.total_steps and first_step > 0 then
    state.mw:step_start(first_step)  -- what was measured while starting is not written
    log.note("%s had finished: its checkpoint is at step %d, the last; nothing to train or "
             .. "evaluate, and %s is left as it was", state.workdir, first_step, metrics.FILE_NAME)
    return
  end
  if first_step ~= 0 then return end
  state.mw:step_start(0)
  for _, e in ipairs(state.evals) do
    if not e.skip_first then run_eval(state, e, params, 0) end
  end
  state.mw:step_end()
end

-- Step `step` begins: the metrics writer's step and its batch, on the device (start's first
-- batch, then the training data's next). The next step's batch is read now and its copy to the
-- device starts on a side stream, so that it overlaps this step's compute (big_vision
-- prefetches batches to the devices; bv.to_device_async). run.state follows, for --debug.
function M.step_start(state, step)
  local window = state.run.profile
  if window and not state.profiled and not state.profiling and step >= window.start
      and step <= window.stop then
    bv.profiler.start({cuda = state.device:match("^cuda") ~= nil})
    state.profiling = step
  end
  if state.profiling then bv.profiler.step(step) end
  bv.stop_progress({step = step, saved = state.saved_step})
  if step == state.first_step + 1 then attach.open(state) end  -- `bvlua attach` from now on
  state.mw:step_start(step)
  attach.write_notes(state)  -- what bvlua attach changed at the end of the last step
  local batch
  if state.first_batch then
    batch = bv.to_device_async(state.first_batch, state.device):wait()
    state.first_batch = nil
  else
    batch, state.data_position = state.next_batch.copy:wait(), state.next_batch.position
  end
  state.next_batch = nil
  if step < state.total_steps then
    local host = state.train_iter:next()
    state.next_batch = {copy = bv.to_device_async(host, state.device),
                        position = state.train_iter:position()}
  end
  state.run.state.batch, state.run.state.step = batch, step
  -- The device's own generator (dropout's), seeded per rank and step (bv.seed_device): every
  -- rank draws its own numbers, and a resumed run the same as an uninterrupted one.
  bv.seed_device(state.device, ((state.config.seed or 0) * 1000003 + state.rank) * 1000003 + step)
  -- big_vision's z/secs/update0, the first step of each process, is timed from here (its batch
  -- on the device) to its loss on the host (log_training: the first steps are logged).
  if step == state.first_step + 1 then state.update0_start = state.chrono:now() end
  return batch
end

-- Whether step `step` logs its training metrics: every log_training steps, and while the
-- chrono warms up (its first ticks time the start-up). The global norms cost a pass over the
-- parameters, so the optimizer computes them at these steps only.
function M.log_now(state, step)
  return chrono.itstime(step, state.log_every, state.total_steps) or state.chrono.warmup > 0
end

-- big_vision's NaN guard, where values are read on the host anyway: at log steps (as
-- big_vision) and before a checkpoint is written (so none holds the parameters of a run that
-- went bad). Reading the loss on every step would stall the device once per step; a NaN
-- persists in the parameters, so the next read finds it. Each {name, value} given, in order,
-- must be finite, else the run stops with an error naming the value and the steps since the
-- last check (what is already checkpointed stays as it is).
function M.check_finite(state, step, ...)
  for _, named in ipairs({...}) do
    local name, x = named[1], named[2]
    if x ~= x or x == math.huge or x == -math.huge then
      error(string.format("%s became nan or inf somewhere within steps [%d, %d]", name,
                          state.last_checked + 1, step), 0)
    end
  end
  state.last_checked = step
end

-- The training metrics of step `step`, with big_vision's names and in its order: the
-- learning-rate schedules, training_loss, the trainer's own `extra_metrics` ({name, value}
-- pairs), the global norms; then the chrono's tick (speed, progress, epoch, ...). The loss (a
-- scalar tensor on the device) and the norms are read here, the step's one host sync, and
-- pass the NaN guard first. m: what opt:update returned with norms = true.
function M.log_training(state, step, loss, m, extra_metrics)
  local mw = state.mw
  loss = loss:item()
  if state.update0_start then
    mw:measure("z/secs/update0", state.chrono:now() - state.update0_start)
    state.update0_start = nil
  end
  M.check_finite(state, step, {"training_loss", loss}, {"l2_grads", m.l2_grads})
  for i, s in ipairs(m.global_schedule) do
    mw:measure("global_schedule" .. (i > 1 and tostring(i - 1) or ""), s)
  end
  mw:measure("training_loss", loss)
  for _, named in ipairs(extra_metrics or {}) do mw:measure(named[1], named[2]) end
  mw:measure("l2_grads", m.l2_grads)
  mw:measure("l2_params", m.l2_params)
  mw:measure("l2_updates", m.l2_updates)
  if state.skip_errors then
    -- Since this process started (a resumed run counts again from 0).
    local total, per, names = skipped_counts(state)
    mw:measure("skipped_examples", total)
    for _, name in ipairs(per and names or {}) do mw:measure("skipped_examples/" .. name, per[name]) end
  end
  state.chrono:tick(step)
  state.logged_step, state.logged_loss = step, loss
end

-- big_vision's checkpoint save: params, the optimizer state and the checkpoint_extras, with
-- the chrono and the data position. Every rank calls it (the optimizer state may be spread
-- over ranks); rank 0 writes the full, unsharded values, so any number of processes can resume.
-- end_of_step runs the NaN guard and writes the step's metrics line first.
-- in_session: asked for by `bvlua attach`, whose session has paused the clock already.
local function save_checkpoint(state, params, step, keep, in_session)
  local shard = state.shard
  if not in_session then state.chrono:pause() end
  local opt_state = shard:full_opt_state(state.opt, state.full_spec)
  params = shard:full_params(params)
  local key = "bv/saved/" .. step .. "/" .. attach.change_count(state)
  if shard.rank == 0 then
    local tensors = {}
    for name, extra in pairs(state.checkpoint_extras) do tensors[name] = extra:state() end
    for name, x in pairs(params) do tensors["params/" .. name] = x end
    for name, x in pairs(opt_state) do tensors["opt/" .. name] = x end
    local ok, warnings = pcall(bv.ckpt.save, state.workdir, step, tensors, {
      chrono = state.chrono:state(step),  -- up to this step, not just to the last log step
      world = shard.world, data_position = state.data_position,
      -- bvlua attach's changes and the notes of them not yet in the metrics file: a resumed
      -- run continues with them
      attach_changes = state.changes, attach_notes = state.attach_notes}, {keep = keep})
    if not ok then
      -- The other ranks wait for this write (below): they fail with it instead of timing out.
      if shard.world > 1 then shard.group:set(key, "failed: " .. tostring(warnings)) end
      error(warnings, 0)
    end
    -- Old checkpoints that could not be deleted: the new one is safe, a leftover costs disk.
    for _, warning in ipairs(warnings or {}) do log.warn(warning) end
  end
  -- The optimizer updates its state in place unless a state tensor is still held (then it
  -- copies it first): let go of the ones handed out for the checkpoint now, not at Lua's next
  -- collection, or the next update copies the whole state.
  opt_state, params = nil, nil
  collectgarbage()
  if shard.world > 1 then
    -- The other ranks wait for rank 0's write here, on the store, rather than in their next
    -- collective, whose timeout (300 s) a large checkpoint's write can outlast. A lost rank 0
    -- still fails this at once. (The key names the changes too: bvlua attach may save a step
    -- again after a change.)
    if shard.rank == 0 then
      shard.group:set(key, "1")
    else
      local v = shard.group:wait(key, tonumber(os.getenv("BV_CKPT_TIMEOUT") or "") or 3600)
      if v ~= "1" then
        error(string.format("rank 0 could not write the checkpoint of step %d: %s", step, v), 0)
      end
    end
  end
  state.saved_step = step
  state.saved_changes = attach.change_count(state)
  bv.stop_progress({step = step, saved = step})
  if not in_session then state.chrono:resume() end
end

-- `--profile START:STOP`: the recording of steps state.profiling..`last` ends; its trace goes to
-- WORKDIR/profile/steps_START-LAST[.rankN].pt.trace.json, and the table of its slowest ops
-- beside it (.txt) and, on rank 0, to stdout.
local function write_profile(state, last)
  local first = state.profiling
  state.profiling, state.profiled = nil, true
  local dir = state.workdir:gsub("/+$", "") .. "/profile"
  bv.fs.mkdirs(dir)
  local name = string.format("%s/steps_%d-%d%s", dir, first, last,
                             state.rank > 0 and ".rank" .. state.rank or "")
  local r = bv.profiler.stop(name .. ".pt.trace.json")
  local text = profile.table(r, {trace = name .. ".pt.trace.json", title = string.format(
      "Profile of steps %d-%d on %s with %d threads", first, last, state.device, bv.threads())})
  bv.fs.write_file(name .. ".txt", text .. "\n")
  log.note("%s", text)
end

-- The end of step `step`, the same in every trainer: the progress line (every step on a
-- terminal, the logged steps in a log), the evaluators that are due, the step's metrics line,
-- then a checkpoint when one is due or a stop was asked for (on any rank; a stop skips the
-- evaluators). The line goes to disk before the checkpoint (see metrics_writer), so the
-- evaluators of a checkpoint step run before its save; the NaN guard, on this step's loss
-- (every rank has the same), runs before both, so that no checkpoint holds a run gone bad.
-- Returns {stopped = step} when the run must end here (the trainer returns it), else nil.
-- loss: the step's, a scalar tensor.
function M.end_of_step(state, step, params, loss)
  if state.rank == 0 and (state.logged_step == step or state.progress.tty) then
    -- The loss of the last logged step: reading this step's would be a host sync per step.
    state.progress:step(step, {loss = state.logged_loss, img_per_sec = state.chrono.img_per_sec,
                               eta = state.chrono.eta})
  end
  -- With several processes this is the step's one host collective; rank 0's `bvlua attach`
  -- socket (something arrived?) rides in it.
  local stop, attach_now = state.shard:stop_requested(attach.pending(state))
  stop = stop or (state.run.stop_after == step and "stop_after")
  local keep = chrono.itstime(step, state.keep_every, state.total_steps, {first = false})
  local save = stop or keep or chrono.itstime(step, state.ckpt_every, state.total_steps)
  if save and state.last_checked < step then
    M.check_finite(state, step, {"training_loss", loss:item()})
  end
  if not stop then
    local evaluated = false
    for _, e in ipairs(state.evals) do
      if chrono.itstime(step, e.log_steps or 0, state.total_steps, {first = false}) then
        profile.range("eval/" .. e.name, run_eval, state, e, params, step)
        evaluated = true
      end
    end
    -- A stop asked for while they ran (the final evaluations included) stops at this step.
    if evaluated then stop = state.shard:stop_requested() end
    if stop and not save then
      save = true
      if state.last_checked < step then M.check_finite(state, step, {"training_loss", loss:item()}) end
    end
  end
  state.mw:step_end()
  if save then
    state.mw:sync()
    profile.range("checkpoint", save_checkpoint, state, params, step, keep)
  end
  if attach_now and not stop then
    -- A prompt attached to the run: at this step boundary (the line and checkpoint are done).
    local function save_here(in_session)
      if state.last_checked < step then
        M.check_finite(state, step, {"training_loss", loss:item()})
      end
      state.mw:sync()
      profile.range("checkpoint", save_checkpoint, state, params, step, keep, in_session)
    end
    local stopped = attach.session(state, {step = step, params = params, loss = loss,
      evaluate = function(e) return run_eval(state, e, params, step, true) end,
      save = function() save_here(true) end})
    if stopped then
      stop = stopped.signal or "bvlua attach's stop()"
    else
      -- A stop signal that came during the session (to any rank): stop here, as between steps.
      stop = state.shard:stop_requested()
      if stop and not attach.saved_at(state, step) then save_here(false) end
    end
  end
  if state.profiling and (stop or step >= state.run.profile.stop) then write_profile(state, step) end
  if stop then
    attach.close(state, string.format("the run stopped after step %d (checkpoint saved)", step))
    state.mw:close()
    state.progress:finish()
    log.note("%s received: saved a checkpoint at step %d and stopped", stop, step)
    return {stopped = step}
  end
end

-- Training is over: the metrics file closed, the progress line ended, big_vision's last note
-- (measured now, after the final evals: bv.chrono's summary).
function M.finish(state)
  if state.skip_errors then
    local total, per, names = skipped_counts(state)
    if total > 0 then
      local parts = {}
      for _, name in ipairs(per and names or {}) do
        parts[#parts + 1] = string.format("%s: %d", name, per[name])
      end
      log.note("skip_errors: skipped %d bad training example(s)%s; the last: %s", total,
               #parts > 0 and " (" .. table.concat(parts, ", ") .. ")" or "",
               state.train_iter:last_skipped_error() or "(on another process)")
    else
      log.note("skip_errors: no training example was skipped")
    end
  end
  local window = state.run.profile
  if state.profiling then
    write_profile(state, state.total_steps)  -- the run ended inside the window
  elseif window and not state.profiled then
    log.warn("--profile %d:%d recorded nothing: %s", window.start, window.stop,
             state.first_step >= state.total_steps
                 and string.format("no step was left to train (the run ends at step %d)",
                                   state.total_steps)
                 or string.format("this run trained steps %d to %d", state.first_step + 1,
                                  state.total_steps))
  end
  attach.close(state, string.format("the run finished after step %d", state.total_steps))
  state.mw:close()
  state.progress:finish()
  bv.stop_progress({announce = false})
  log.note("Done!\n%s", state.chrono:summary())
end

return M
