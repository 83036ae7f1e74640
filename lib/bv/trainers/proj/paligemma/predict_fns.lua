-- PaliGemma's predict functions (big_vision's trainers/proj/paligemma/predict_fns.py), by the
-- names evaluators use in `pred`:
--   logits(params, batch)     -> text logits [B, T-1, V] of the model on text[:, :-1]
--   decode(params, batch, kw) -> tokens [B, max_decode_len]: the prompt (image, text where
--       mask_input / input_mask is 1) runs once into the KV cache, then one token per step until
--       every row has produced kw.eos_token or max_decode_len tokens exist. kw: max_decode_len
--       (required), eos_token, sampler ("greedy", "temperature(t)", "nucleus(p, t=1.0)"),
--       best_of_n (keep the sample with the highest log-probability up to its first eos), rng.
local models = require "bv.models"

local M = {}

-- Rows of `t` in the order of `index` (a Lua list of 1-based rows).
local function rows(t, index)
  local parts = {}
  for i, r in ipairs(index) do parts[i] = t:narrow(1, r, 1) end
  return bv.cat(parts, 1)
end

-- Each row repeated n times in place (row 1 n times, then row 2, ...).
local function repeat_rows(t, n)
  local index = {}
  for r = 1, t:size(1) do
    for _ = 1, n do index[#index + 1] = r end
  end
  return rows(t, index)
end

-- The eval batch's image and text, or an error naming the batch's keys.
local function need(batch, who)
  for _, key in ipairs({"image", "text"}) do
    if not bv.is_tensor(batch[key]) then
      bv.data.require_key(batch, key, {who = who, wants = "the model", fix = "end the "
        .. "evaluator's pp with bv.paligemma.combine_and_keep_eval{text_len = N}, which makes "
        .. "text from prefix (and suffix) and keeps image"})
    end
  end
end

-- Ones shaped like t, on t's device (the masks a batch leaves out; a host tensor among the
-- device's would fail there).
local function ones_like(t) return bv.ones(t:shape(), "int64"):to(t:device()) end

-- The prompt's parts: the eval pp gives mask_input (big_vision) or input_mask.
local function prompt(batch)
  need(batch, "decode")
  local text = batch.text
  local ones = ones_like(text)
  return {image = batch.image, text = text, mask_ar = batch.mask_ar or ones,
          input_mask = batch.mask_input or batch.input_mask or ones}
end

function M.get_all(model)
  local fns = {}

  function fns.logits(params, batch)
    need(batch, "logits")
    local t = batch.text
    local n = t:size(2)
    local logits = model:apply(params, batch.image, t:narrow(2, 1, n - 1),
                               (batch.mask_ar or ones_like(t)):narrow(2, 1, n - 1))
    return logits
  end

  function fns.decode(params, batch, kw)
    kw = kw or {}
    local max_len = kw.max_decode_len
    if type(max_len) ~= "number" or max_len < 1 then
      error("decode: pred_kw.max_decode_len must be a positive number, got " .. tostring(max_len), 2)
    end
    local n = kw.best_of_n or 1
    local eos = kw.eos_token
    local sampler = kw.sampler or "greedy"
    local rng = kw.rng or bv.rng(0)
    local p = prompt(batch)
    if n > 1 then
      for k, v in pairs(p) do p[k] = repeat_rows(v, n) end
    end
    local logits, cache = model:prefill(params, p, {max_decode_len = max_len})
    local B = logits:size(1)
    local tokens = bv.zeros({B, max_len}, "int64")
    local score = {}      -- Σ logp up to and including the first eos
    local done = {}
    for b = 1, B do score[b], done[b] = 0, false end
    for step = 1, max_len do
      local tok, logp = models.sample(logits, sampler, rng, batch.mask_logits)
      tokens[{{}, step}] = tok
      local toks, lps = tok:totable(), logp:totable()
      local all_done = true
      for b = 1, B do
        if not done[b] then
          score[b] = score[b] + lps[b]
          done[b] = eos ~= nil and toks[b] == eos
        end
        all_done = all_done and done[b]
      end
      if all_done or step == max_len then break end
      logits = model:extend(params, cache, tok)
    end
    if n == 1 then return tokens end
    -- Best of n: per example, the candidate with the highest score.
    local keep = {}
    for e = 1, B // n do
      local best = (e - 1) * n + 1
      for c = best + 1, e * n do
        if score[c] > score[best] then best = c end
      end
      keep[e] = best
    end
    return rows(tokens, keep)
  end

  return fns
end

return M
