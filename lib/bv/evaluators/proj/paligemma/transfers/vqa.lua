-- proj.paligemma.transfers.vqa (big_vision's evaluators/proj/paligemma/transfers/vqa.py):
-- decodes an answer per example and scores it against the ground truth.
--   evals.val = {type = "proj.paligemma.transfers.vqa", pred = "decode",
--                pred_kw = {max_decode_len = 8}, tokenizer = "gemma(...)", to_lower = false,
--                outfile = "{workdir}/vqa_{split}_{step}.json", data = {...}, pp = "..."}
-- One ground truth (`answer`): acc = acc_any = exact match, anls = ANLS. Several (`answers`, a
-- list): acc = min(1, matches / 3), acc_any = min(1, matches), anls = the best ANLS. Metrics:
-- acc, acc_any, anls (when any example was scored) and num. The outfile gets a JSON list of
-- {question_id, answer[, gts]}; {workdir}, {split} and {step} are filled in at every run (in
-- big_vision the name stays at the first run's step).
local evaluators = require "bv.evaluators"
local suggest = require "bv.suggest"

require("bv.config_keys").declare("evaluator:proj.paligemma.transfers.vqa", {
  doc = "decoded answers scored against the ground truth (acc, acc_any, anls)",
  include = {"evaluator", "eval_input"}, keys = {
  {"tokenizer", "string|table", nil, "the tokenizer spec (required)"},
  {"to_lower", "bool", false, "lower-case answers before scoring"},
  {"outfile", "string", "{workdir}/{split}.json", "the answers as JSON ({workdir}, {split}, "
    .. "{step} filled in)"},
  {"out_question_key", "string", "question_id", "the outfile's question field"},
  {"out_answer_key", "string", "answer", "the outfile's answer field"},
}})

local M = {}

local Evaluator = {}
Evaluator.__index = Evaluator

function M.new(predict_fn, cfg)
  if type(predict_fn) ~= "function" then error("vqa: predict_fn must be a function", 2) end
  cfg = evaluators.copy(cfg or {})
  local self = setmetatable({}, Evaluator)
  self.predict_fn = predict_fn
  self.tokenizer = evaluators.pop(cfg, "tokenizer")
  if type(self.tokenizer) ~= "string" and type(self.tokenizer) ~= "table" then
    error("vqa: needs a tokenizer (a tokenizer spec such as \"gemma(tokensets=('loc', 'seg'))\")", 2)
  end
  self.to_lower = evaluators.pop(cfg, "to_lower", false)
  self.outfile = evaluators.pop(cfg, "outfile", "{workdir}/{split}.json")
  self.question_key = evaluators.pop(cfg, "out_question_key", "question_id")
  self.answer_key = evaluators.pop(cfg, "out_answer_key", "answer")
  local d = cfg.data or {}
  self.split = d.split or (type(d.fname) == "string" and d.fname:match("([^/]+)%.%w+$")) or "eval"
  self.make_iter = evaluators.input_pipeline(cfg, "vqa")
  return self
end

-- ANLS with threshold 0.5: 1 - normalised edit distance when below 0.5, else 0.
function M.anls(gt, pred)
  if gt == "" then return pred == "" and 1 or 0 end
  local d = suggest.distance(gt, pred) / math.max(utf8.len(gt), utf8.len(pred))
  return d < 0.5 and 1 - d or 0
end

local function at(v, i)
  if v == nil then return nil end
  if bv.is_tensor(v) then return v[i]:item() end
  return v[i]
end

-- ctx = {workdir =, step =, write = false on ranks other than 0} from the trainer; with several
-- processes also ctx.sum and ctx.gather: each rank decodes its part of the split, the scores are
-- summed and rank 0 writes every rank's records (in data order: the parts are contiguous).
function Evaluator:run(params, ctx)
  ctx = ctx or {}
  local split = ctx.sum ~= nil and ctx.gather ~= nil
  local tok = type(self.tokenizer) == "table" and self.tokenizer or bv.text.tokenizer(self.tokenizer)
  local it <close> = self.make_iter(split and ctx or nil)
  local sums = {acc = 0, acc_any = 0, anls = 0}
  local num, scored, records = 0, 0, {}
  while true do
    local batch = it:next()
    if not batch then break end
    local tokens = self.predict_fn(params, batch, {eos_token = tok.eos_token}):totable()
    local mask = batch._mask:totable()
    for b, row in ipairs(tokens) do
      if mask[b] then
        num = num + 1
        local answer = tok:to_str(row, {stop_at_eos = true})
        if self.to_lower then answer = answer:lower() end
        local rec = {[self.question_key] = at(batch.question_id, b), [self.answer_key] = answer}
        local gts = at(batch.answers, b)
        if type(gts) == "table" and #gts > 0 then
          local matches, best = 0, 0
          for _, gt in ipairs(gts) do
            if gt == answer then matches = matches + 1 end
            best = math.max(best, M.anls(gt, answer))
          end
          sums.acc = sums.acc + math.min(1, matches / 3)
          sums.acc_any = sums.acc_any + math.min(1, matches)
          sums.anls = sums.anls + best
          scored = scored + 1
          rec.gts = gts
        elseif at(batch.answer, b) ~= nil then
          local gt = at(batch.answer, b)
          local hit = gt == answer and 1 or 0
          sums.acc, sums.acc_any = sums.acc + hit, sums.acc_any + hit
          sums.anls = sums.anls + M.anls(gt, answer)
          scored = scored + 1
          rec.gts = {gt}
        end
        records[#records + 1] = rec
      end
    end
  end
  if split then
    for _, k in ipairs({"acc", "acc_any", "anls"}) do sums[k] = ctx.sum(sums[k]) end
    num, scored = ctx.sum(num), ctx.sum(scored)
    records = evaluators.gather_records(records, ctx)
  end
  if self.outfile and self.outfile ~= "" then  -- rank 0 alone writes
    evaluators.write_records(self.outfile, records, ctx, {split = self.split})
  end
  local out = {}
  if scored > 0 then
    for _, k in ipairs({"acc", "acc_any", "anls"}) do out[#out + 1] = {k, sums[k] / scored} end
  end
  out[#out + 1] = {"num", num}
  return out
end

return M
