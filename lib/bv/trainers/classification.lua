-- The classification trainer: big_vision's train.py, in Lua. Read top to bottom:
--   data -> model -> optimizer -> resume | model_init | scratch -> loop -> done.
-- A step: loss and gradients (model:loss_and_grads: forward, loss and backward in one native
-- call), the update (opt:update), the log with the NaN guard (at log steps: reading the loss is
-- a host sync), then checkpoints and evaluations.
-- Metrics go to WORKDIR/big_vision_metrics.txt with big_vision's names. What the trainers share
-- is in bv.trainers.utils, whose header lists the fields of the trainer state.
local config_keys = require "bv.config_keys"
local utils = require "bv.trainers.utils"

-- What this trainer reads besides what every trainer does (bv.trainers.utils).
config_keys.declare("trainer:classification", {
  doc = "big_vision's train.py: image classification",
  include = {"trainer"},
  keys = {
    {"model_name", "string", nil, "the model (required): vit or bit"},
    {"model", "table", {}, "the model's options (see model:NAME); num_classes comes from "
      .. "config.num_classes, vit's image_size from the data",
      scope = function(_, cfg) return cfg.model_name and "model:" .. cfg.model_name end},
    {"num_classes", "int", nil, "classes of the model's head"},
    {"loss", "string", "sigmoid_xent", "the training loss: sigmoid_xent or softmax_xent"},
    {"mixup", "table", nil, "{p = alpha}: mixup of pairs of examples (p: the Beta parameter)"},
    {"init_head_bias", "float", nil, "fills head/bias with this (e.g. -10 for sigmoid_xent)"},
  }})

local function copy(source)
  local out = {}
  for k, v in pairs(source or {}) do out[k] = v end
  return out
end

-- run = {config_file = "configs/x.lua:arg" (data workers run its register_pp_ops),
--        device = "cpu" (bv.device; `bvlua train --device`),
--        group = a bv.dist group when several processes train together (bv.sharding),
--        stop_after = N (optional: checkpoint and return after step N, as if stopped)}
-- The trainer keeps run.state = {config, model, params, owned, opt, batch, step} current, so
-- that `bvlua train --debug` can show them in a REPL when a step fails.
-- Returns {params =, steps =}, or {stopped = step} when it stopped early.
return function(config, workdir, run)
  local refused = bv.models.classification_refusal(config.model_name)
  if refused then error("config.model_name: " .. refused, 0) end  -- before any data is read
  local state = utils.start(config, workdir, run)  -- processes, clock, metrics file, data
  local shard = state.shard
  -- The first batch has what the model and the loss take: said now, not inside a step.
  local who, what = "classification trainer", "the training batch"
  bv.data.require_key(state.first_batch, "image", {who = who, batch = what, wants = "the model",
                      fix = 'keep "image" in the train pp (keep("image", "labels"))'})
  bv.data.require_key(state.first_batch, "labels", {who = who, batch = what,
    wants = "the loss (" .. (config.loss or "sigmoid_xent") .. ")", fix = string.format(
      'make one-hot labels in the train pp: onehot(%s, key="label", key_result="labels")'
      .. '|keep("image", "labels")', tostring(config.num_classes or "num_classes"))})

  -- Model: big_vision builds Model(num_classes=config.num_classes, **config.model).
  local model_cfg = copy(config.model)
  model_cfg.num_classes = config.num_classes
  if config.model_name == "vit" and model_cfg.image_size == nil then
    local shape = state.first_batch.image:shape()
    model_cfg.image_size = {shape[2], shape[3]}
  end
  local model = bv.models.build(config.model_name, model_cfg)
  local params = model:init(config.seed or 0)
  if config.init_head_bias and params["head/bias"] then
    params["head/bias"]:fill_(config.init_head_bias)
  end
  state.mw:measure("num_params", model:param_count())

  -- Optimizer: big_vision's optax.make; with fsdp/zero1 each rank updates what it owns.
  local opt = utils.optimizer(state, model)

  -- Mixup draws from its own stream, which checkpoints keep (tensor "rng"): a resumed run mixes
  -- the same examples an uninterrupted one would.
  local rng = bv.rng(config.seed or 0)
  params = utils.resume_or_init(state, model, params, opt, {rng = rng})

  utils.evaluators(state, {predict = function(p, batch)
    local image = batch.image or bv.data.require_key(batch, "image", {who = "evaluation",
      wants = "the model", fix = 'keep "image" in the evaluator\'s pp'})
    return model:apply(p, image)
  end})
  utils.initial_evals(state, params)

  local loss_opts = {loss = config.loss or "sigmoid_xent", accum_steps = config.accum_steps,
                     mixup_p = config.mixup and config.mixup.p, rng = rng,
                     autocast = config.autocast}  -- "bfloat16": mixed precision forward
  for step = state.first_step + 1, state.total_steps do
    local batch = utils.step_start(state, step)
    -- Forward (on mixed-up images when config.mixup), loss and backward on this rank's
    -- examples, averaged over ranks.
    local loss, grads = shard:gradients(params, function(p)
      return model:loss_and_grads(p, batch, loss_opts)
    end)
    local log_now = utils.log_now(state, step)
    local m = opt:update(shard:owned(params), grads, {norms = log_now})
    utils.release(grads)  -- freed now, not kept through the next backward by the collector
    shard:sync_params(params)  -- zero1: the owners broadcast what they updated
    if log_now then utils.log_training(state, step, loss, m) end  -- reads the loss: NaN guard
    local stopped = utils.end_of_step(state, step, params, loss)  -- checkpoint, stop, evals
    if stopped then return stopped end
  end
  utils.finish(state)
  return {params = params, steps = state.total_steps}
end
