-- The PaliGemma trainer: big_vision's trainers/proj/paligemma/train.py, in Lua. Read top to
-- bottom: data -> model -> optimizer -> resume | model_init | scratch -> loop -> done. The same
-- skeleton as trainers/classification.lua, on bv.trainers.utils; what differs:
--   * batches are pp'd by combine_and_keep_train: image, text, mask_ar, mask_loss;
--   * the loss is the prefix-LM loss on text[:, 1:] weighted by mask_loss (model:loss_and_grads),
--     with config.label_smoothing; avg_sup_seqlen / max_sup_seqlen are logged as in big_vision;
--   * predict functions are logits and decode (trainers/proj/paligemma/predict_fns.lua);
--   * model_init may be a path, a vanity name (pt_224, under $BV_GEMMA_DIR) or {img =, llm =}.
local config_keys = require "bv.config_keys"
local json = require "bv.json"
local utils = require "bv.trainers.utils"
local predict_fns_mod = require "bv.trainers.proj.paligemma.predict_fns"

-- What this trainer reads besides what every trainer does (bv.trainers.utils).
config_keys.declare("trainer:proj.paligemma.train", {
  doc = "big_vision's trainers/proj/paligemma/train.py",
  include = {"trainer"},
  keys = {
    {"model_name", "string", "proj.paligemma.paligemma", "the model"},
    {"model", "table", {}, "the model's options: img, llm, img_model (see model:NAME)",
     scope = function(_, cfg) return "model:" .. (cfg.model_name or "proj.paligemma.paligemma") end},
    {"label_smoothing", "float", 0, "label smoothing of the next-token loss"},
    {"mixup", "table", nil, "refused: this trainer has no mixup (as big_vision)"},
  }})

-- Supervised tokens per example (mask_loss on text[:, 1:]), as big_vision logs them: the mean
-- over every rank's examples and the max of this rank's.
local function supervised_seqlens(shard, batch)
  local n = batch.mask_loss:size(2)
  local sup = batch.mask_loss:narrow(2, 2, n - 1):to("float32"):sum(2)
  return {{"avg_sup_seqlen", shard:mean(sup:mean():item())}, {"max_sup_seqlen", sup:max():item()}}
end

-- run: as for the classification trainer (config_file, group, stop_after; run.state).
-- Returns {params =, steps =, model =, predict_fns =}, or {stopped = step}.
return function(config, workdir, run)
  if config.mixup then error("paligemma trainer: mixup is not supported (as in big_vision)", 0) end
  local state = utils.start(config, workdir, run)  -- processes, clock, metrics file, data
  local shard = state.shard
  -- The first batch has what the model and the loss take: said now, not inside a step.
  for _, key in ipairs({"image", "text", "mask_ar", "mask_loss"}) do
    bv.data.require_key(state.first_batch, key, {who = "paligemma trainer",
      batch = "the training batch", wants = key == "image" and "the model" or "the loss",
      fix = "end the train pp with bv.paligemma.combine_and_keep_train{text_len = N}, which "
            .. "makes text, mask_ar and mask_loss from prefix and suffix and keeps image"})
  end

  -- Model: big_vision builds Model(**config.model); the ViT's image size comes from the data.
  local model_cfg = json.decode(json.encode(config.model or {}))
  model_cfg.img = model_cfg.img or {}
  if model_cfg.img.image_size == nil and (model_cfg.img_model or "vit") == "vit" then
    local shape = state.first_batch.image:shape()
    model_cfg.img.image_size = {shape[2], shape[3]}
  end
  local model = bv.models.build(config.model_name or "proj.paligemma.paligemma", model_cfg)
  local params = model:init(config.seed or 0)
  state.mw:measure("num_params", model:param_count())

  local opt = utils.optimizer(state, model)  -- fsdp/zero1: each rank updates what it owns
  params = utils.resume_or_init(state, model, params, opt)
  local predict_fns = predict_fns_mod.get_all(model)
  utils.evaluators(state, predict_fns)
  utils.initial_evals(state, params)

  for step = state.first_step + 1, state.total_steps do
    local batch = utils.step_start(state, step)
    -- The loss of this rank's examples and its gradients, averaged over ranks.
    local loss, grads = shard:gradients(params, function(p)
      return model:loss_and_grads(p, batch, {label_smoothing = config.label_smoothing or 0,
                                             accum_steps = config.accum_steps,
                                             autocast = config.autocast})
    end)
    local log_now = utils.log_now(state, step)
    local m = opt:update(shard:owned(params), grads, {norms = log_now})
    utils.release(grads)  -- freed now, not kept through the next backward by the collector
    shard:sync_params(params)  -- zero1: the owners broadcast what they updated
    if log_now then  -- reads the loss (the NaN guard) and the norms
      utils.log_training(state, step, loss, m, supervised_seqlens(shard, batch))
    end
    local stopped = utils.end_of_step(state, step, params, loss)  -- checkpoint, stop, evals
    if stopped then return stopped end
  end
  utils.finish(state)
  return {params = params, steps = state.total_steps, model = model, predict_fns = predict_fns}
end
