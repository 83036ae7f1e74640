-- bv.losses: big_vision's classification losses (utils.softmax_xent, utils.sigmoid_xent), on
-- bv tensors, called with a table of keyword arguments as in big_vision:
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
  local nll = -(labels * logits:log_softmax(-1)):sum(-1)
  if kw.kl then
    nll = nll + (labels * labels:clamp(1e-8):log()):sum(-1)
  end
  return reduce and nll:mean() or nll
end

-- log(sigmoid(x)) computed stably: min(x, 0) - log(1 + exp(-|x|)).
local function log_sigmoid(x)
  return x:clamp(nil, 0) - ((-x:abs()):exp() + 1):log()
end
M.log_sigmoid = log_sigmoid

-- -sum(y log(sigmoid(l)) + (1 - y) log(sigmoid(-l))) over the last axis.
function M.sigmoid_xent(kw)
  local logits, labels, reduce = check("sigmoid_xent", kw)
  local nll = -(labels * log_sigmoid(logits) + (1 - labels) * log_sigmoid(-logits)):sum(-1)
  return reduce and nll:mean() or nll
end

-- The loss names the classification evaluator accepts, sorted.
function M.names()
  return {"sigmoid_xent", "softmax_xent"}
end

return M
