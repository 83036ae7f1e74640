-- PaliGemma's training step and decoding on a tiny model: which tokens carry the loss, the KV
-- cache against full forward passes, samplers, the decode predict function.
local T = require "tests.lua.lib.testing"
local predict_fns = require "bv.trainers.proj.paligemma.predict_fns"

local function tiny()
  local m = bv.models.build("proj.paligemma.paligemma", {img = {variant = "mu/4", image_size = 8},
    llm = {width = 32, depth = 2, mlp_dim = 48, num_heads = 4, num_kv_heads = 1, head_dim = 8,
           vocab_size = 20}})
  local p = m:init(0)
  for name, t in pairs(p) do p[name] = bv.randn(t:shape(), bv.rng(#name)) * 0.3 end
  return m, p
end

T.test("token_nll and label smoothing follow big_vision's formula", function()
  local logits = bv.randn({1, 2, 5}, bv.rng(1))
  local targets = bv.tensor({{2, 4}})
  local logp = logits:log_softmax(3)
  local nll = require("bv.losses").token_nll(logits, targets)
  T.near(nll[{1, 1}]:item(), -logp[{1, 1, 3}]:item(), 1e-6)   -- ids are 0-based, Lua 1-based
  T.near(nll[{1, 2}]:item(), -logp[{1, 2, 5}]:item(), 1e-6)
  local s = 0.1
  local smooth = require("bv.losses").token_nll(logits, targets, s)
  local want = -((1 - s) * logp[{1, 1, 3}]:item() + s / 4 * (logp[{1, 1}]:sum():item() - logp[{1, 1, 3}]:item()))
  T.near(smooth[{1, 1}]:item(), want, 1e-5)
  T.raises(function() require("bv.losses").token_nll(logits, bv.tensor({1, 2})) end, "must be [B, T, V] and [B, T]")
end)

T.test("remat (scanned ViT by default, Gemma's remat_policy) gives the same loss and gradients", function()
  local function grads_of(img_remat, llm_remat)
    local m = bv.models.build("proj.paligemma.paligemma", {
      img = {variant = "mu/4", image_size = 8, scan = true, remat_policy = img_remat},
      llm = {width = 32, depth = 2, mlp_dim = 48, num_heads = 4, num_kv_heads = 1, head_dim = 8,
             vocab_size = 20, remat_policy = llm_remat}})
    local p = m:init(0)
    for name, t in pairs(p) do p[name] = bv.randn(t:shape(), bv.rng(#name)) * 0.3 end
    local img = bv.randn({2, 8, 8, 3}, bv.rng(2))
    local text = bv.tensor({{2, 5, 6, 7, 1, 0}, {2, 9, 3, 1, 0, 0}})
    local mask_ar = bv.tensor({{0, 0, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1}})
    local mask_loss = bv.tensor({{0, 0, 1, 1, 1, 0}, {0, 0, 1, 1, 0, 0}})
    return m:loss_and_grads(p, {image = img, text = text, mask_ar = mask_ar, mask_loss = mask_loss},
                            {accum_steps = 2})
  end
  local l0, g0 = grads_of("none", "none")
  local l1, g1 = grads_of("nothing_saveable", "nothing_saveable")
  T.near(l1:item(), l0:item(), 1e-6)
  local n = 0
  for name, g in pairs(g0) do
    T.truthy(g1[name] and g1[name]:allclose(g, 1e-5, 1e-6), "gradient of " .. name)
    n = n + 1
  end
  T.truthy(n > 20, "compared " .. n .. " gradients")
  T.raises(function()
    local m = bv.models.build("vit", {variant = "mu/4", image_size = 8, num_classes = 2,
                                      scan = true, dropout = 0.1})
    m:loss_and_grads(m:init(0), {image = bv.zeros({1, 8, 8, 3}), labels = bv.ones({1, 2})})
  end, "needs dropout 0")
end)

T.test("prefix-LM loss: only mask_loss positions of text[:, 1:] count, per example", function()
  local m, p = tiny()
  local img = bv.randn({2, 8, 8, 3}, bv.rng(2))
  local text = bv.tensor({{2, 5, 6, 7, 1, 0}, {2, 9, 3, 1, 0, 0}})
  local mask_ar = bv.tensor({{0, 0, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1}})
  local mask_loss = bv.tensor({{0, 0, 1, 1, 1, 0}, {0, 0, 1, 1, 0, 0}})
  local loss, grads = m:loss_and_grads(p, {image = img, text = text, mask_ar = mask_ar,
                                           mask_loss = mask_loss})
  -- By hand: logits of text[:, :-1] predict text[:, 1:]; weights mask_loss[:, 1:].
  local logits = m:apply(p, img, text:narrow(2, 1, 5), mask_ar:narrow(2, 1, 5))
  local nll = require("bv.losses").token_nll(logits, text:narrow(2, 2, 5)):totable()
  local w = mask_loss:narrow(2, 2, 5):totable()
  local total = 0
  for b = 1, 2 do
    local s, n = 0, 0
    for t = 1, 5 do s, n = s + nll[b][t] * w[b][t], n + w[b][t] end
    total = total + s / math.max(n, 1)
  end
  T.near(loss:item(), total / 2, 1e-5)
  T.truthy(grads["llm/embedder/input_embedding"] ~= nil and grads["img/head/kernel"] ~= nil, "grads")
  -- A token that carries no loss and is seen by nobody (the last padding) changes nothing.
  local text2 = bv.tensor({{2, 5, 6, 7, 1, 4}, {2, 9, 3, 1, 0, 0}})
  local loss2 = m:loss_and_grads(p, {image = img, text = text2, mask_ar = mask_ar,
                                      mask_loss = mask_loss})
  T.near(loss2:item(), loss:item(), 1e-6)
  T.raises(function()
    m:loss_and_grads(p, {image = img, text = text, mask_ar = mask_ar:narrow(2, 1, 5),
                         mask_loss = mask_loss})
  end, "must have text's shape")
end)

T.test("PaliGemma decoding with the KV cache equals full forward passes (greedy)", function()
  local m, p = tiny()
  local img = bv.randn({2, 8, 8, 3}, bv.rng(3))
  -- Prompts of different lengths: row 2 ends in padding.
  local text = bv.tensor({{2, 5, 6, 7}, {2, 9, 0, 0}})
  local batch = {image = img, text = text, mask_ar = bv.zeros({2, 4}, "int64"),
                 mask_input = bv.tensor({{1, 1, 1, 1}, {1, 1, 0, 0}})}
  local fns = predict_fns.get_all(m)
  local cached = fns.decode(p, batch, {max_decode_len = 5}):totable()
  -- Without a cache: run the whole sequence each step, take the last real position's argmax.
  local prompts = {{2, 5, 6, 7}, {2, 9}}
  for b = 1, 2 do
    local seq = {table.unpack(prompts[b])}
    local n_prompt = #seq
    for step = 1, 5 do
      local ar = {}
      for i = 1, #seq do ar[i] = i <= n_prompt and 0 or 1 end
      local logits = m:apply(p, img:narrow(1, b, 1), bv.tensor({seq}), bv.tensor({ar}))
      local next_tok = logits[{1, #seq}]:argmax(1):item() - 1
      T.eq(cached[b][step], next_tok, string.format("row %d step %d", b, step))
      seq[#seq + 1] = next_tok
    end
  end
  -- eos stops early; best_of_n and samplers run and keep the shape.
  local first = cached[1][1]
  local stopped = fns.decode(p, batch, {max_decode_len = 5, eos_token = first}):totable()
  T.eq(stopped[1][1], first)
  local best = fns.decode(p, batch, {max_decode_len = 3, best_of_n = 3, sampler = "temperature(1.0)",
                                     rng = bv.rng(1)})
  T.eq(best:shape(), {2, 3})
  T.raises(function() fns.decode(p, batch, {}) end, "max_decode_len must be a positive number")
end)

T.test("samplers: greedy, temperature, nucleus; bad specs name themselves", function()
  local logits = bv.tensor({{0.0, 5.0, 1.0}, {3.0, 0.0, 0.0}})
  local tok, logp = bv.models.sample(logits, "greedy", bv.rng(0))
  T.eq(tok:totable(), {1, 0})
  T.near(logp[1]:item(), logits:log_softmax(2)[{1, 2}]:item(), 1e-6)
  -- A tiny nucleus keeps only the most likely token.
  T.eq(bv.models.sample(logits, "nucleus(0.01)", bv.rng(0)):totable(), {1, 0})
  local a = bv.models.sample(logits, "temperature(t=5.0)", bv.rng(7))
  local b = bv.models.sample(logits, "temperature(5.0)", bv.rng(7))
  T.eq(a:totable(), b:totable())
  -- tok_mask: a masked token is never sampled.
  T.eq(bv.models.sample(logits, "greedy", bv.rng(0), bv.tensor({1})):totable(), {2, 0})
  T.raises(function() bv.models.sample(logits, "beam(3)", bv.rng(0)) end, "unknown sampler 'beam(3)'")
  T.raises(function() bv.models.sample(logits, "temperature(x)", bv.rng(0)) end, "'x' is not a number")
  T.raises(function() bv.models.sample(logits, "nucleus(t=1)", bv.rng(0)) end, "nucleus needs p")
end)

-- A model and batch moved to the fake device (the test device, where a host tensor among device
-- ones fails, and a draw with a generator of another device fails as CUDA's do).
local function on_device(t, device)
  local out = {}
  for k, v in pairs(t) do out[k] = bv.is_tensor(v) and v:to(device) or v end
  return out
end

T.device_test("samplers on a device: a device generator seeded from the host stream",
              function(device)
  local logits = bv.randn({8, 50}, bv.rng(3)):to(device)
  local never = bv.tensor({0, 1})  -- token ids from the host
  for _, spec in ipairs({"temperature(1.0)", "nucleus(0.9)", "nucleus(0.9, t=2.0)"}) do
    local rng = bv.rng(7)
    local saved = rng:state()
    local tok, logp = bv.models.sample(logits, spec, rng)
    T.eq(tok:device(), device, spec)
    T.eq(logp:device(), device, spec)
    T.eq(tok:shape(), {8}, spec)
    -- The host stream decides the draw: put back (a resumed run), it draws the same tokens.
    local resumed = bv.rng(0)
    resumed:set_state(saved)
    T.eq(bv.models.sample(logits, spec, resumed):to("cpu"):totable(), tok:to("cpu"):totable(),
         spec .. ": resumed")
    T.truthy(not (resumed:state() == saved), spec .. ": the host stream did not move on")
    T.eq(resumed:state(), rng:state(), spec .. ": both streams moved on alike")
    local masked = bv.models.sample(logits, spec, rng, never)
    for _, id in ipairs(masked:to("cpu"):totable()) do T.truthy(id >= 2, spec .. ": masked token") end
  end
  -- Greedy draws nothing: the stream stays where it was.
  local rng = bv.rng(7)
  local saved = rng:state()
  T.eq(bv.models.sample(logits, "greedy", rng):to("cpu"):totable(),
       bv.models.sample(logits:to("cpu"), "greedy", bv.rng(0)):totable())
  T.eq(rng:state(), saved)
end)

T.device_test("decode on a device: greedy as on the host; best_of_n with a sampler runs there",
              function(device)
  local m, p = tiny()
  local batch = {image = bv.randn({2, 8, 8, 3}, bv.rng(3)), text = bv.tensor({{2, 5, 6, 7}, {2, 9, 0, 0}}),
                 mask_input = bv.tensor({{1, 1, 1, 1}, {1, 1, 0, 0}})}  -- no mask_ar: made there
  local fns = predict_fns.get_all(m)
  local dp, dbatch = on_device(p, device), on_device(batch, device)
  T.eq(fns.decode(dp, dbatch, {max_decode_len = 4}):to("cpu"):totable(),
       fns.decode(p, batch, {max_decode_len = 4}):totable())
  local kw = {max_decode_len = 3, best_of_n = 3, sampler = "nucleus(0.9)", eos_token = 1}
  kw.rng = bv.rng(5)
  local a = fns.decode(dp, dbatch, kw)
  kw.rng = bv.rng(5)
  local b = fns.decode(dp, dbatch, kw)
  T.eq(a:shape(), {2, 3})
  T.eq(a:to("cpu"):totable(), b:to("cpu"):totable())
  dbatch.mask_logits = bv.tensor({3, 4})  -- token ids from the host
  kw.rng = bv.rng(5)
  T.eq(fns.decode(dp, dbatch, kw):shape(), {2, 3})
  T.eq(fns.logits(dp, dbatch):device(), device)
end)

T.test("img_model = bit: the ResNet's last feature map gives the image tokens", function()
  local m = bv.models.build("proj.paligemma.paligemma", {img_model = "bit",
    img = {depth = {1, 1, 1, 1}, width = 0.5},
    llm = {width = 32, depth = 1, mlp_dim = 48, num_heads = 2, num_kv_heads = 1, head_dim = 16,
           vocab_size = 20}})
  local p = m:init(0)
  T.eq(p["img/head/kernel"]:shape(), {1024, 32})  -- half-width BiT ends with 1024 channels
  local text = bv.tensor({{2, 5, 6}, {2, 7, 8}})
  local logits, out = m:apply(p, bv.randn({2, 64, 64, 3}, bv.rng(1)), text)
  T.eq(logits:shape(), {2, 3, 20})
  T.eq(out["img/zimg"]:shape(), {2, 4, 32})  -- 64 px / 32 = a 2x2 map: 4 tokens
  T.raises(function() bv.models.build("proj.paligemma.paligemma", {img_model = "resnet"}) end,
           "img_model 'resnet' is not supported")
  T.raises(function()
    bv.models.build("proj.paligemma.paligemma", {img_model = "bit", img = {num_classes = 3}})
  end, "takes no num_classes")
end)

T.run()
