-- The `classification` evaluator (big_vision's evaluators/classification.py): top-1 precision
-- and the mean loss over a data set.
--
--   evals.val = {type = "classification", data = {...}, pp = "...|onehot(10, key='label',
--                key_result='labels')", loss_name = "softmax_xent", log_steps = 1000}
--
-- predict_fn(params, batch) returns the logits [B, C] first; the batch it gets has neither the
-- labels nor `_mask`. labels are [B, C] (one-hot, multi-hot or soft). Per batch:
--   mask     = _mask * max(labels, over classes)  -- rows with all-zero labels don't count
--   loss    += sum(mask * loss_fn(logits, labels)) -- per-example loss named by loss_name
--   ncorrect += sum(mask * labels[argmax(logits)]) -- the label value at the top-1 class, so
--                                                     soft labels give fractional credit
--   nseen   += sum(mask)
-- and run() yields prec@1 = ncorrect / nseen and loss = loss / nseen. Batch sums are computed
-- in the logits' float dtype (float32 for lower precisions) and accumulated in doubles.
local evaluators = require "bv.evaluators"
local losses = require "bv.losses"

require("bv.config_keys").declare("evaluator:classification", {
  doc = "top-1 precision and mean loss", include = {"evaluator", "eval_input"}, keys = {
  {"loss_name", "string", nil, "softmax_xent or sigmoid_xent (required)"},
  {"label_key", "string", "labels", "the batch key of the labels ([B, C])"},
  {"outfile", "string", nil, "a JSON list of {id, label, prediction} per example ({workdir}, "
    .. "{step} filled in)"},
}})

local M = {}

local Evaluator = {}
Evaluator.__index = Evaluator

-- cfg: loss_name (softmax_xent or sigmoid_xent), label_key (default "labels"), outfile (a JSON
-- list of {id, label, prediction} per example, 0-based classes, for `bvlua mistakes`; {workdir},
-- {step} filled in; the eval pp must keep "id") and the input pipeline keys of
-- evaluators.input_pipeline.
function M.new(predict_fn, cfg)
  if type(predict_fn) ~= "function" then
    error("classification: predict_fn must be a function", 2)
  end
  cfg = evaluators.copy(cfg or {})
  local loss_name = evaluators.pop(cfg, "loss_name")
  local known = losses.names()
  local ok = false
  for _, n in ipairs(known) do ok = ok or n == loss_name end
  if not ok then
    error(string.format("classification: loss_name must be one of %s, got %s",
                        table.concat(known, ", "), tostring(loss_name)), 2)
  end
  local self = setmetatable({}, Evaluator)
  self.predict_fn = predict_fn
  self.loss_fn = losses[loss_name]
  self.label_key = evaluators.pop(cfg, "label_key", "labels")
  self.outfile = evaluators.pop(cfg, "outfile")
  self.make_iter = evaluators.input_pipeline(cfg, "classification")
  return self
end

local function float_dtype(t)
  local dt = t:dtype()
  if dt == "float64" then return dt end
  return "float32"
end

local function shape_str(t)
  return "[" .. table.concat(t:shape(), ", ") .. "]"
end

-- Returns ncorrect, loss sum and nseen of one batch (Lua numbers).
function Evaluator:_batch(params, batch)
  local labels, mask = batch[self.label_key], batch._mask
  if not bv.is_tensor(labels) then
    bv.data.require_key(batch, self.label_key, {who = "classification",
      wants = "label_key", fix = string.format('make one-hot labels in the eval pp: '
        .. 'onehot(num_classes, key="label", key_result="%s")', self.label_key)})
  end
  batch[self.label_key], batch._mask = nil, nil
  local ids = batch.id
  if self.outfile and ids == nil then
    error("classification: outfile needs each example's id: keep \"id\" in the eval pp "
          .. "(keep(\"image\", \"labels\", \"id\"))", 0)
  end
  local logits = self.predict_fn(params, batch)
  if not bv.is_tensor(logits) or logits:dim() ~= 2 then
    error("classification: predict_fn must return logits [batch, classes] first, got "
      .. (bv.is_tensor(logits) and shape_str(logits) or type(logits)), 0)
  end
  if labels:dim() ~= 2 or labels:shape()[1] ~= logits:shape()[1]
      or labels:shape()[2] ~= logits:shape()[2] then
    error(string.format("classification: logits %s and labels '%s' %s differ in shape",
                        shape_str(logits), self.label_key, shape_str(labels)), 0)
  end
  local dt = float_dtype(logits)
  logits, labels = logits:to(dt), labels:to(dt)
  local m = mask:to(dt) * labels:max(2)
  local loss = self.loss_fn({logits = logits, labels = labels, reduction = false})
  -- The label value at the top-1 class: compare the (1-based) argmax with 1..C for a one-hot
  -- row selector, then sum it against the labels.
  local top1 = logits:argmax(2):unsqueeze(2)
  local classes = bv.arange(1, logits:shape()[2] + 1):unsqueeze(1)
  local correct = (labels * top1:eq(classes):to(dt)):sum(2)
  if self.outfile then
    local pred, gt, real = top1:squeeze(2):totable(), labels:argmax(2):totable(), mask:totable()
    for b = 1, #pred do
      if real[b] then
        local id = bv.is_tensor(ids) and ids[b]:item() or ids[b]
        self.records[#self.records + 1] = {id = id, label = gt[b] - 1, prediction = pred[b] - 1}
      end
    end
  end
  return (correct * m):sum():item(), (loss * m):sum():item(), m:sum():item()
end

-- Runs over the whole data set; returns {{"prec@1", p}, {"loss", l}}. ctx.sum (several
-- processes): each rank runs its part of the split and the counts are summed over ranks.
function Evaluator:run(params, ctx)
  local sum = ctx and ctx.sum
  local it <close> = self.make_iter(sum and ctx)
  local ncorrect, loss, nseen = 0.0, 0.0, 0.0
  self.records = {}
  while true do
    local batch = it:next()
    if not batch then break end
    local c, l, n = self:_batch(params, batch)
    ncorrect, loss, nseen = ncorrect + c, loss + l, nseen + n
  end
  if sum then ncorrect, loss, nseen = sum(ncorrect), sum(loss), sum(nseen) end
  if self.outfile then
    local records = sum and evaluators.gather_records(self.records, ctx) or self.records
    evaluators.write_records(self.outfile, records, ctx)
  end
  self.records = nil
  return {{"prec@1", ncorrect / nseen}, {"loss", loss / nseen}}
end

return M
