-- The tiny PaliGemma benchmark's bvlua side (scripts/bench's `paligemma` section runs it next to
-- scripts/bench_paligemma_peer.py, the same model in plain PyTorch).
--   bvlua run scripts/bench_paligemma.lua train STEPS   (bf16: the same under bf16 autocast)
--     -> "steps/s minor-page-faults-per-step kernel-share-of-cpu-time" (as bench_train.lua)
--   bvlua run scripts/bench_paligemma.lua decode STEPS
--     -> the same line, where a step is one whole greedy decode of the batch
--   bvlua run scripts/bench_paligemma.lua check DIR   (a one-off check, not timed)
--     -> DIR/params.npz (perturbed parameters), DIR/batch.npz (inputs), DIR/out.npz (logits,
--        loss, gradients, decoded tokens); `bench_paligemma_peer.py check DIR` compares.
-- The model is configs/paligemma.lua:variant=tiny's (a half-width BiT-R26 at 64x64: 2x2 cells of
-- 1024 channels -> 4 image tokens; a 2-layer Gemma of width 64, multi-query, vocab 43), batch
-- 32, text_len 8. Random data shaped as the pp makes it: train rows are [bos prefix sep suffix
-- eos pad...] (text_len + 1 ids, mask_ar 0 on bos..sep, mask_loss 1 on suffix and eos), decode
-- prompts [bos prefix sep pad...] (mask_input 0 on the padding).
-- train: the trainer's step: model:loss_and_grads (the prefix-LM loss on text[:, 1:]) and
--   scale_by_adam at lr 1e-3 (constant, no clipping, no weight decay), float32; bf16: the same
--   step with autocast = "bfloat16", as the config's autocast.
-- decode: predict_fns' greedy decode without eos: prefill of image + prompt into the KV cache,
--   then DECODE_LEN (8) tokens, each the argmax of the last logits (and its log-probability, as
--   the sampler returns it), the first from the prefill, the other 7 from extend. No early stop
--   at eos, so both sides do the same work whatever the tokens.
local json = require "bv.json"

local work, steps = arg[1], arg[2]
local BATCH, RES, TEXT_LEN, DECODE_LEN = 32, 64, 8, 8
local VOCAB, BOS, EOS, SEP = 43, 2, 1, 3

local model = bv.models.build("proj.paligemma.paligemma", {
  img_model = "bit", img = {depth = 26, width = 0.5},
  llm = {variant = "gemma_2b", width = 64, depth = 2, mlp_dim = 128, num_heads = 2,
         num_kv_heads = 1, head_dim = 32, vocab_size = VOCAB}})

-- A random id that is none of the special ones.
local function word(rng) return rng:integer(SEP + 1, VOCAB - 1) end

-- Training rows as combine_and_keep_train makes them: prefix 1-3 ids, suffix 1-3.
local function train_batch(rng)
  local text, ar, loss = {}, {}, {}
  for b = 1, BATCH do
    local t, a, l = {BOS}, {0}, {0}
    for _ = 1, rng:integer(1, 3) do t[#t + 1], a[#a + 1], l[#l + 1] = word(rng), 0, 0 end
    t[#t + 1], a[#a + 1], l[#l + 1] = SEP, 0, 0
    for _ = 1, rng:integer(1, 3) do t[#t + 1], a[#a + 1], l[#l + 1] = word(rng), 1, 1 end
    t[#t + 1], a[#a + 1], l[#l + 1] = EOS, 1, 1
    while #t < TEXT_LEN + 1 do t[#t + 1], a[#a + 1], l[#l + 1] = 0, 1, 0 end
    text[b], ar[b], loss[b] = t, a, l
  end
  return {image = bv.randn({BATCH, RES, RES, 3}, rng), text = bv.tensor(text, "int64"),
          mask_ar = bv.tensor(ar, "int64"), mask_loss = bv.tensor(loss, "int64")}
end

-- Decode prompts as combine_and_keep_eval makes them: bos, prefix 1-6 ids, sep, padding.
local function decode_batch(rng)
  local text, ar, input = {}, {}, {}
  for b = 1, BATCH do
    local t, a, m = {BOS}, {0}, {1}
    for _ = 1, rng:integer(1, TEXT_LEN - 2) do t[#t + 1], a[#a + 1], m[#m + 1] = word(rng), 0, 1 end
    t[#t + 1], a[#a + 1], m[#m + 1] = SEP, 0, 1
    while #t < TEXT_LEN do t[#t + 1], a[#a + 1], m[#m + 1] = 0, 1, 0 end
    text[b], ar[b], input[b] = t, a, m
  end
  return {image = bv.randn({BATCH, RES, RES, 3}, rng), text = bv.tensor(text, "int64"),
          mask_ar = bv.tensor(ar, "int64"), input_mask = bv.tensor(input, "int64")}
end

-- predict_fns' decode loop (greedy, no eos): tokens [B, DECODE_LEN]; with `keep`, the logits
-- each token was picked from go into keep[step].
local function decode(params, prompt, keep)
  local unused = bv.rng(0)  -- greedy draws nothing
  local logits, cache = model:prefill(params, prompt, {max_decode_len = DECODE_LEN})
  local tokens = bv.zeros({BATCH, DECODE_LEN}, "int64"):to(prompt.text:device())
  for step = 1, DECODE_LEN do
    if keep then keep[step] = logits end
    local tok = bv.models.sample(logits, "greedy", unused)
    tokens[{{}, step}] = tok
    if step == DECODE_LEN then break end
    logits = model:extend(params, cache, tok)
  end
  return tokens
end

local params = model:init(0)
local rng = bv.rng(0)
-- BENCH_DEVICE=cuda (scripts/gpu_check): the timed steps run there (not the check).
local device = os.getenv("BENCH_DEVICE") or "cpu"
if device == "fake" then device = bv._fake_device() end  -- scripts/gpu_check --fake
local function to_device(batch)
  for k, t in pairs(batch) do batch[k] = t:to(device) end
  return batch
end

if work == "check" then
  -- Parameters off their init (zero GroupNorm and RMSNorm scales would hide whole branches),
  -- one batch of each kind, and what bvlua computes from them.
  local dir = steps or error("check: bvlua run scripts/bench_paligemma.lua check DIR", 0)
  bv.fs.mkdirs(dir)
  local names = {}
  for name in pairs(params) do names[#names + 1] = name end
  table.sort(names)  -- pairs' order changes from run to run; the draws should not
  for _, name in ipairs(names) do
    params[name] = params[name] + bv.randn(params[name]:shape(), rng) * 0.3
  end
  model:relayout(params)
  local tb, db = train_batch(rng), decode_batch(rng)
  local n = TEXT_LEN + 1
  local logits = model:apply(params, tb.image, tb.text:narrow(2, 1, n - 1),
                             tb.mask_ar:narrow(2, 1, n - 1))
  local loss, grads = model:loss_and_grads(params, tb)
  local keep = {}
  local tokens = decode(params, db, keep)
  -- The same through the evaluators' own decode (eos never set: no early stop).
  local pf = require("bv.trainers.proj.paligemma.predict_fns").get_all(model)
  local theirs = pf.decode(params, {image = db.image, text = db.text, mask_ar = db.mask_ar,
                                    mask_input = db.input_mask}, {max_decode_len = DECODE_LEN})
  assert(theirs:equal(tokens), "check: predict_fns' decode differs from this script's")
  local out = {train_logits = logits, loss = loss, decode_tokens = tokens,
               decode_logits = bv.stack(keep, 2)}
  local n_grads = 0
  for name, g in pairs(grads) do out["grad/" .. name], n_grads = g, n_grads + 1 end
  bv.ckpt.save_npz(dir .. "/params.npz", params)
  bv.ckpt.save_npz(dir .. "/batch.npz", {
    image = tb.image, text = tb.text, mask_ar = tb.mask_ar, mask_loss = tb.mask_loss,
    dec_image = db.image, dec_text = db.text, dec_mask_ar = db.mask_ar,
    dec_input_mask = db.input_mask})
  bv.ckpt.save_npz(dir .. "/out.npz", out)
  print(string.format("check: loss %.6f, %d gradients, written to %s", loss:item(),
                      n_grads, dir))
  return
end

steps = math.tointeger(tonumber(steps))
assert((work == "train" or work == "bf16" or work == "decode") and steps and steps >= 1,
       "usage: bvlua run scripts/bench_paligemma.lua {train|bf16|decode} STEPS | check DIR")
local step
for name, t in pairs(params) do params[name] = t:to(device) end
if work == "train" or work == "bf16" then
  local opt = bv.optim.new(json.encode({optax_name = "scale_by_adam", lr = 1e-3, schedule = {}}),
                           model:param_shapes(), {total_steps = steps + 1, batch_size = BATCH,
                                                  data_size = BATCH, device = device})
  local batch = to_device(train_batch(rng))
  step = function()
    local _, grads = model:loss_and_grads(params, batch,
                                          {autocast = work == "bf16" and "bfloat16" or nil})
    opt:update(params, grads, {norms = false})  -- as the trainer between log steps
  end
else
  local prompt = to_device(decode_batch(rng))
  step = function() decode(params, prompt) end
end
step()  -- warm-up
-- A GPU's queued steps are done when a value of the last is back on the host (one stream).
local _, any = next(params)
dofile(arg[0]:gsub("[^/]*$", "") .. "bench_timing.lua")(step, steps,
                                                       function() any:sum():item() end)
