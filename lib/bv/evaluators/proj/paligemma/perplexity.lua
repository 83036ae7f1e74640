-- proj.paligemma.perplexity (big_vision's evaluators/proj/paligemma/perplexity.py): the mean
-- over examples of the token cross-entropy of `pred` (usually "logits"), built on `mean`.
--   evals["val/pplx"] = {type = "proj.paligemma.perplexity", pred = "logits", key = "text",
--                        shift_labels = true, data = {...}, pp = "..."}
-- Per example: sum = Σ_t w_t·CE_t and avg = sum / max(Σ_t w_t, 2e-38), with weights w =
-- batch.mask_loss (else ones), zeroed where the label is pad_token. shift_labels drops the first
-- position of labels and weights (the logits of text[:, :-1] predict text[:, 1:]). Metrics: sum,
-- avg.
local evaluators = require "bv.evaluators"
local mean = require "bv.evaluators.mean"
local losses = require "bv.losses"

require("bv.config_keys").declare("evaluator:proj.paligemma.perplexity", {
  doc = "mean token cross-entropy of pred (usually logits)",
  include = {"evaluator", "eval_input"}, keys = {
  {"key", "string", "labels", "the batch key of the target tokens"},
  {"shift_labels", "bool", false, "drop the first position of labels and weights"},
  {"pad_token", "int", nil, "labels equal to it do not count"},
}})

local M = {}

function M.new(predict_fn, cfg)
  cfg = evaluators.copy(cfg or {})
  local key = evaluators.pop(cfg, "key", "labels")
  local shift = evaluators.pop(cfg, "shift_labels", false)
  local pad_token = evaluators.pop(cfg, "pad_token")
  local function per_example(params, batch)
    local logits = predict_fn(params, batch)
    local labels = batch[key]
    if not bv.is_tensor(labels) then
      bv.data.require_key(batch, key, {who = "perplexity", wants = "key",
        fix = "set key to the tokens' name (\"text\" after combine_and_keep_train)"})
    end
    local weights = (batch.mask_loss or bv.ones(labels:shape())):to("float32")
    if pad_token ~= nil then weights = weights * labels:ne(pad_token):to("float32") end
    if shift then
      local n = labels:size(2)
      labels, weights = labels:narrow(2, 2, n - 1), weights:narrow(2, 2, n - 1)
    end
    if logits:size(2) ~= labels:size(2) then
      error(string.format("perplexity: %d logits per example but %d labels (shift_labels?)",
                          logits:size(2), labels:size(2)), 0)
    end
    local sum = (losses.token_nll(logits, labels) * weights):sum(2)
    return {sum = sum, avg = sum / weights:sum(2):clamp(2e-38)}
  end
  return mean.new(per_example, cfg)
end

return M
