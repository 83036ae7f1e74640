-- bv.losses: big_vision's losses (utils.softmax_xent, utils.sigmoid_xent, PaliGemma's token
-- loss) for the evaluators. The math is runtime/train/losses.cpp, the same functions the
-- training step calls; here they take a table of keyword arguments as in big_vision:
--
--   local per_example = losses.softmax_xent({logits = logits, labels = labels, reduction = false})
--
-- logits and labels are [batch, classes] (any leading dimensions, classes last); labels are
-- one-hot, multi-hot or soft. With reduction (the default) the result is the mean over the
-- batch as a 0-d tensor, else one loss per example. Labels are cast to the logits' dtype.
local M = {}

local function check(name, kw)
  if type(kw) ~= "table" or not bv.is_tensor(kw.logits) or not bv.is_tensor(kw.labels) then
    error("losses." .. name .. ": call it with {logits = tensor, labels = tensor}", 3)
  end
  local ls, ys = kw.logits:shape(), kw.labels:shape()
  local same = #ls == #ys
  for i = 1, #ls do same = same and ls[i] == ys[i] end
  if not same then
    error(string.format("losses.%s: logits [%s] and labels [%s] differ in shape", name,
                        table.concat(ls, ", "), table.concat(ys, ", ")), 3)
  end
  local logits = kw.logits
  local dt = logits:dtype()
  if dt ~= "float32" and dt ~= "float64" and dt ~= "bfloat16" and dt ~= "float16" then
    logits = logits:to("float32")
  end
  return logits, kw.labels:to(logits:dtype()), kw.reduction ~= false
end

-- -sum(labels * log_softmax(logits)) over the last axis. kl = true subtracts the labels'
-- entropy (sum(labels * log(max(labels, 1e-8)))), giving the KL divergence.
function M.softmax_xent(kw)
  local logits, labels, reduce = check("softmax_xent", kw)
  local nll = bv._losses.softmax_xent(logits, labels, kw.kl or false)
  return reduce and nll:mean() or nll
end

-- -sum(y log(sigmoid(l)) + (1 - y) log(sigmoid(-l))) over the last axis.
function M.sigmoid_xent(kw)
  local logits, labels, reduce = check("sigmoid_xent", kw)
  local nll = bv._losses.sigmoid_xent(logits, labels)
  return reduce and nll:mean() or nll
end

-- log(sigmoid(x)), stable for large |x|.
M.log_sigmoid = bv._losses.log_sigmoid

-- One of the losses above by name, per example: per_example_loss("softmax_xent", logits, labels).
M.per_example_loss = bv._losses.per_example_loss

-- PaliGemma's token loss: -log p(target) per position, [B, T] from logits [B, T, V] and targets
-- [B, T]; with label_smoothing s the target is 1 - s on the true token and s / (V - 1) elsewhere.
M.token_nll = bv._losses.token_nll

-- The loss names the classification evaluator accepts, sorted.
function M.names()
  return {"sigmoid_xent", "softmax_xent"}
end

return M
