-- The PaliGemma trainer: big_vision's trainers/proj/paligemma/train.py, in Lua. Read top to
-- bottom: data -> model -> optimizer -> resume | model_init | scratch -> loop (step, log,
-- checkpoint, evaluate) -> done. The same skeleton as trainers/classification.lua; what differs:
--   * batches are pp'd by combine_and_keep_train: image, text, mask_ar, mask_loss;
--   * the loss is the prefix-LM loss on text[:, 1:] weighted by mask_loss (bv.train.lm_loss_and_grads),
--     with config.label_smoothing; avg_sup_seqlen / max_sup_seqlen are logged as in big_vision;
--   * predict functions are logits and decode (trainers/proj/paligemma/predict_fns.lua);
--   * model_init may be a path, a vanity name (pt_224, under $BV_GEMMA_DIR) or {img =, llm =}.
local json = require "bv.json"
local chrono_mod = require "bv.chrono"
local progress_mod = require "bv.progress"
local sharding = require "bv.sharding"
local common = require "bv.trainers.common"
local predict_fns_mod = require "bv.trainers.proj.paligemma.predict_fns"

local function finite(x) return x == x and x ~= math.huge and x ~= -math.huge end

-- run: as for the classification trainer (config_file, group, stop_after; run.state).
return function(config, workdir, run)
  run = run or {}
  local shard = sharding.new(config, run.group)
  local rank, world = shard.rank, shard.world
  local cfg_json = json.encode(config)
  local progress = progress_mod.new()
  local function say(s) if rank == 0 then progress:print(s) end end
  local function note(s) say("NOTE: " .. s) end
  local function steps(prefix, cfg, data_size, batch_size, total, fallback)
    return bv.optim.steps(prefix, json.encode(cfg), data_size, batch_size, total or 0, fallback)
  end
  if config.mixup then error("paligemma trainer: mixup is not supported (as in big_vision)", 0) end
  local chrono = chrono_mod.new()
  bv.handle_stop_signals()
  bv.fs.mkdirs(workdir)
  local mw = common.metrics_writer(workdir, rank, say)

  local ck = bv.ckpt.load(workdir)
  if ck and ck.warning then note(ck.warning) end

  -- Data: pp'd examples with image, text, mask_ar and mask_loss.
  local batch_size = config.input.batch_size
  local train_iter, ntrain = bv.data.training(config.input, {
    seed = config.seed or 0, config = run.config_file, rank = rank, world = world,
    position = ck and ck.state.data_position or 0})
  local total_steps = steps("total", config, ntrain, batch_size)
  progress.total_steps = total_steps
  note(string.format("Running for %d steps, that means %f epochs", total_steps,
                     total_steps * batch_size / ntrain))
  local first_batch = train_iter:next()
  for _, key in ipairs({"image", "text", "mask_ar", "mask_loss"}) do
    if not bv.is_tensor(first_batch[key]) then
      error(string.format("paligemma trainer: training batches need '%s' (use "
        .. "bv.paligemma.combine_and_keep_train in the pp)", key), 0)
    end
  end

  -- Model: big_vision builds Model(**config.model); the ViT's image size comes from the data.
  local model_cfg = json.decode(json.encode(config.model or {}))
  model_cfg.img = model_cfg.img or {}
  if model_cfg.img.image_size == nil and (model_cfg.img_model or "vit") == "vit" then
    local shape = first_batch.image:shape()
    model_cfg.img.image_size = {shape[2], shape[3]}
  end
  local model = bv.models.build(config.model_name or "proj.paligemma.paligemma", model_cfg)
  local params = model:init(config.seed or 0)
  mw:measure("num_params", model:param_count())

  -- With fsdp/zero1, each rank updates (and keeps the state of) what it owns (bv.sharding).
  local shapes = model:param_shapes()
  local sched = {total_steps = total_steps, batch_size = batch_size, data_size = ntrain}
  local opt, full_spec = sharding.make_optimizer(shard, cfg_json, shapes, sched)

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
    chrono:load(ck.state.chrono)
    first_step = ck.step
    note(string.format("Resumed from %s at step %d", ck.path, first_step))
  elseif config.model_init then
    local report
    params, report = model:load(params, config.model_init, config.model_load)
    note(string.format("Initialised %d parameters from %s", #report.loaded,
                       type(config.model_init) == "string" and config.model_init or "parts"))
  end
  model:relayout(params)
  params = shard:hold(params)  -- fsdp: this rank keeps its parts; the model reads placeholders
  common.measure_memory(mw, shard, params, opt)

  local predict_fns = predict_fns_mod.get_all(model)
  local function get_steps(prefix, cfg)
    local n = steps(prefix, cfg, ntrain, batch_size, total_steps, 0)
    return n > 0 and n or nil
  end
  local evals, run_eval = common.evaluations{config = config, run = run,
    predict_fns = predict_fns, get_steps = get_steps, mw = mw, chrono = chrono, note = note,
    workdir = workdir, shard = shard}

  local ckpt = {workdir = workdir, shard = shard, opt = opt, full_spec = full_spec,
                chrono = chrono, train_iter = train_iter}
  local function save(step, keep) common.save(ckpt, params, step, keep) end

  chrono:inform({first_step = first_step, total_steps = total_steps, global_bs = batch_size,
                 steps_per_epoch = ntrain / batch_size,
                 measure = function(k, v) mw:measure(k, v) end, write_note = function() end})
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
  local step_opts = {label_smoothing = config.label_smoothing or 0,
                     accum_steps = config.accum_steps, autocast = config.autocast}
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
      return bv.train.lm_loss_and_grads(model.name, model.cfg_json, p, batch.image, batch.text,
                                        batch.mask_ar, batch.mask_loss, step_opts)
    end)
    local log_now = bv.optim.itstime(step, log_every, total_steps) or chrono.warmup > 0
    local m = opt:update(shard:opt_params(params), grads, {norms = log_now})
    shard:sync_params(params)  -- zero1: the owners broadcast what they updated

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
      -- Supervised tokens per example (mask_loss on text[:, 1:]), as big_vision logs them.
      local n = batch.mask_loss:size(2)
      local sup = batch.mask_loss:narrow(2, 2, n - 1):to("float32"):sum(2)
      mw:measure("avg_sup_seqlen", shard:mean(sup:mean():item()))
      mw:measure("max_sup_seqlen", sup:max():item())
      mw:measure("l2_grads", m.l2_grads)
      mw:measure("l2_params", m.l2_params)
      mw:measure("l2_updates", m.l2_updates)
      chrono:tick(step)
    end
    if rank == 0 and (log_now or progress.tty) then
      progress:step(step, {loss = loss, img_per_sec = chrono.img_per_sec, eta = chrono.eta})
    end

    local stopped = common.end_of_step(step_end, step, params)  -- checkpoint, stop, evals
    if stopped then return stopped end
  end
  mw:close()
  progress:finish()
  note("Done!\n" .. chrono:note())
  return {params = params, steps = total_steps, model = model, predict_fns = predict_fns}
end
