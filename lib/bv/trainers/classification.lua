-- The classification trainer: big_vision's train.py, in Lua. Read top to bottom:
--   data -> model -> optimizer -> resume | model_init | scratch -> loop (step, log, checkpoint,
--   evaluate) -> done.
-- One native call does forward, loss and backward (bv.train.loss_and_grads), one the optimizer
-- update (opt:update). Metrics go to WORKDIR/big_vision_metrics.txt with big_vision's names.
local json = require "bv.json"
local chrono_mod = require "bv.chrono"
local progress_mod = require "bv.progress"
local sharding = require "bv.sharding"
local common = require "bv.trainers.common"

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

local function finite(x) return x == x and x ~= math.huge and x ~= -math.huge end

-- run = {config_file = "configs/x.lua:arg" (data workers load it for inline ops),
--        group = a bv.dist group when several processes train together (bv.sharding),
--        stop_after = N (optional: checkpoint and return after step N, as if stopped)}
-- The trainer keeps run.state = {config, model, params, parts, opt, batch, step} current, so that
-- `bvlua train --debug` can show them in a REPL when a step fails.
return function(config, workdir, run)
  run = run or {}
  local shard = sharding.new(config, run.group)
  local rank, world = shard.rank, shard.world
  local cfg_json = json.encode(config)
  -- stdout: notes and eval results as lines, training as one progress line (bv.progress).
  local progress = progress_mod.new()
  local function say(s) if rank == 0 then progress:print(s) end end
  local function note(s) say("NOTE: " .. s) end
  local function steps(prefix, cfg, data_size, batch_size, total, fallback)
    return bv.optim.steps(prefix, json.encode(cfg), data_size, batch_size, total or 0, fallback)
  end
  local chrono = chrono_mod.new()  -- first: program time starts here
  bv.handle_stop_signals()  -- SIGTERM/SIGINT from now on: checkpoint at the next step and stop
  bv.fs.mkdirs(workdir)
  local mw = common.metrics_writer(workdir, rank, say)

  -- Resume first: the data must start where the checkpoint left off.
  local ck = bv.ckpt.load(workdir)
  if ck and ck.warning then note(ck.warning) end

  -- Data.
  local batch_size = config.input.batch_size
  local train_iter, ntrain = bv.data.training(config.input, {
    seed = config.seed or 0, config = run.config_file, rank = rank, world = world,
    position = ck and ck.state.data_position or 0})
  local total_steps = steps("total", config, ntrain, batch_size)
  progress.total_steps = total_steps
  note(string.format("Running for %d steps, that means %f epochs", total_steps,
                     total_steps * batch_size / ntrain))
  local first_batch = train_iter:next()  -- also tells the model the image size

  -- Model: big_vision builds Model(num_classes=config.num_classes, **config.model).
  local model_cfg = copy(config.model)
  model_cfg.num_classes = config.num_classes
  if config.model_name == "vit" and model_cfg.image_size == nil then
    local shape = first_batch.image:shape()
    model_cfg.image_size = {shape[2], shape[3]}
  end
  local model = bv.models.build(config.model_name, model_cfg)
  local params = model:init(config.seed or 0)
  if config.init_head_bias and params["head/bias"] then params["head/bias"]:fill_(config.init_head_bias) end

  -- Optimizer: big_vision's optax.make (schedules, freezing, clipping, lr_mults, wd).
  -- With fsdp/zero1, each rank updates (and keeps the state of) what it owns (bv.sharding).
  local shapes = model:param_shapes()
  local sched = {total_steps = total_steps, batch_size = batch_size, data_size = ntrain}
  local opt, full_spec = sharding.make_optimizer(shard, cfg_json, shapes, sched)
  mw:measure("num_params", model:param_count())
  local rng = bv.rng(config.seed or 0)  -- mixup's stream

  -- Initialise: resume > model_init > scratch.
  local first_step = 0
  if ck then
    for name in pairs(params) do
      params[name] = ck.tensors["params/" .. name]
        or error("checkpoint " .. ck.path .. " lacks params/" .. name, 0)
    end
    local opt_state = {}
    for name, t in pairs(ck.tensors) do
      local rest = name:match("^opt/(.*)$")
      if rest then opt_state[rest] = t end
    end
    opt:load_state(shard:local_opt_state(opt, opt_state))
    rng:set_state(ck.tensors.rng)
    chrono:load(ck.state.chrono)
    first_step = ck.step
    note(string.format("Resumed from %s at step %d", ck.path, first_step))
  elseif config.model_init then
    local report
    params, report = model:load(params, config.model_init, config.model_load)
    note(string.format("Initialised %d parameters from %s", #report.loaded, config.model_init))
  end
  model:relayout(params)  -- loaded tensors are row-major; the model may prefer another layout
  params = shard:hold(params)  -- fsdp: this rank keeps its parts; the model reads placeholders
  common.measure_memory(mw, shard, params, opt)

  -- What evaluators may call, by name (an eval's `pred` key).
  local predict_fns = {
    predict = function(p, batch) return model:apply(p, batch.image) end,
  }
  local function get_steps(prefix, cfg)
    local n = steps(prefix, cfg, ntrain, batch_size, total_steps, 0)
    return n > 0 and n or nil
  end
  local evals, run_eval = common.evaluations{config = config, run = run,
    predict_fns = predict_fns, get_steps = get_steps, mw = mw, chrono = chrono, note = note,
    workdir = workdir, shard = shard}

  local ckpt = {workdir = workdir, shard = shard, opt = opt, full_spec = full_spec,
                chrono = chrono, train_iter = train_iter}
  local function save(step, keep) common.save(ckpt, params, step, keep, {rng = rng:state()}) end

  chrono:inform({first_step = first_step, total_steps = total_steps, global_bs = batch_size,
                 steps_per_epoch = ntrain / batch_size,
                 measure = function(k, v) mw:measure(k, v) end,
                 write_note = function() end})  -- its estimates are on the progress line
  -- The initial evaluation, as big_vision: at step 0 (or when resuming a finished run).
  if first_step == 0 or first_step == total_steps then
    mw:step_start(first_step)
    for _, e in ipairs(evals) do
      if not e.skip_first or first_step == total_steps then run_eval(e, params, first_step) end
    end
    mw:step_end()
  end

  local log_every = steps("log_training", config, ntrain, batch_size, total_steps)
  local ckpt_every = steps("ckpt", config, ntrain, batch_size, total_steps, 0)
  local keep_every = steps("keep_ckpt", config, ntrain, batch_size, total_steps, 0)
  if keep_every == 0 and ckpt_every > 0 then keep_every = total_steps end
  local step_end = {shard = shard, run = run, mw = mw, progress = progress, note = note,
                    save = save, evals = evals, run_eval = run_eval, total_steps = total_steps,
                    ckpt_every = ckpt_every, keep_every = keep_every}
  local step_opts = {loss = config.loss or "sigmoid_xent", accum_steps = config.accum_steps,
                     mixup_p = config.mixup and config.mixup.p, rng = rng,
                     autocast = config.autocast}  -- "bfloat16": mixed precision forward
  local last_checked = first_step
  -- Under fsdp, params holds placeholders (zeros); parts is what this rank keeps and updates.
  run.state = {config = config, model = model, params = params, opt = opt, step = first_step,
               parts = shard:opt_params(params)}

  for step = first_step + 1, total_steps do
    mw:step_start(step)
    local batch = first_batch or train_iter:next()
    first_batch = nil
    run.state.batch, run.state.step = batch, step
    -- Averaged over ranks: each saw batch_size / world examples.
    local loss, grads = shard:gradients(params, function(p)
      return bv.train.loss_and_grads(model.name, model.cfg_json, p, batch.image, batch.labels,
                                     step_opts)
    end)
    local log_now = bv.optim.itstime(step, log_every, total_steps) or chrono.warmup > 0
    -- l2_params/l2_updates cost a pass over the parameters: at log steps only.
    local m = opt:update(shard:opt_params(params), grads, {norms = log_now})
    shard:sync_params(params)  -- zero1: the owners broadcast what they updated

    -- big_vision's NaN guard, checked every step; what is already checkpointed stays.
    for _, kv in ipairs({{"training_loss", loss}, {"l2_grads", m.l2_grads}}) do
      if not finite(kv[2]) then
        error(string.format("%s became nan or inf somewhere within steps [%d, %d]", kv[1],
                            last_checked + 1, step), 0)
      end
    end
    last_checked = step

    if log_now then
      for i, s in ipairs(m.global_schedule) do
        mw:measure("global_schedule" .. (i > 1 and tostring(i - 1) or ""), s)
      end
      mw:measure("training_loss", loss)
      mw:measure("l2_grads", m.l2_grads)
      mw:measure("l2_params", m.l2_params)
      mw:measure("l2_updates", m.l2_updates)
      chrono:tick(step)
    end
    -- A terminal sees every step; a log gets a line per log step.
    if rank == 0 and (log_now or progress.tty) then
      progress:step(step, {loss = loss, img_per_sec = chrono.img_per_sec, eta = chrono.eta})
    end

    local stopped = common.end_of_step(step_end, step, params)  -- checkpoint, stop, evals
    if stopped then return stopped end
  end
  mw:close()
  progress:finish()
  note("Done!\n" .. chrono:note())
  return {params = params, steps = total_steps}
end
