-- The out table of m:apply holds big_vision's out dict, flattened with "/" (vit.py's _Model,
-- Encoder and Encoder1DBlock; two_towers.py's Model): its keys, and each entry's definition.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

-- The sorted keys of a table.
local function keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- Every parameter random (zero-initialised heads would hide a wrong definition).
local function randomize(params, seed)
  local rng, out = bv.rng(seed), {}
  for _, name in ipairs(keys(params)) do out[name] = bv.randn(params[name]:shape(), rng) * 0.3 end
  return out
end

local function close(got, want, what, tol)
  T.eq(got:shape(), want:shape(), what .. " shape")
  T.truthy(got:allclose(want, tol or 1e-5, tol or 1e-6), what)
end

-- vit: x [n, h, w, c] @ name/kernel + name/bias, token by token.
local function dense(p, name, x)
  return x:matmul(p[name .. "/kernel"]) + p[name .. "/bias"]
end

local function vit(cfg, seed)
  local full = {variant = "mu/4", depth = 2, image_size = 12}
  for k, v in pairs(cfg) do full[k] = v end
  local m = bv.models.build("vit", full)
  return m, randomize(m:init(0), seed or 1)
end

T.test("vit: the out dict's keys, as big_vision's _Model sets them", function()
  local x = bv.randn({2, 12, 12, 3}, bv.rng(2))
  local blocks = {}
  for i = 0, 1 do
    for _, k in ipairs({"sa", "+sa", "mlp", "+mlp"}) do
      blocks[#blocks + 1] = string.format("encoder/block%02d/%s", i, k)
    end
  end
  local function want(extra)
    local out = {"stem", "with_posemb", "encoded", "pre_logits", "pre_logits_2d"}
    for _, k in ipairs(blocks) do out[#out + 1] = k end
    for _, k in ipairs(extra) do out[#out + 1] = k end
    table.sort(out)
    return out
  end
  local function got(cfg)
    local m, p = vit(cfg)
    local _, out = m:apply(p, x)
    return keys(out)
  end
  T.eq(got({pool_type = "gap"}), want({"encoder/pre_ln", "head_input"}))
  T.eq(got({pool_type = "map", num_classes = 3}),
       want({"encoder/pre_ln", "head_input", "logits", "logits_2d"}))
  T.eq(got({pool_type = "tok", num_classes = 3, rep_size = 8}),
       want({"encoder/pre_ln", "head_input", "logits", "logits_2d"}))
  -- pool_type none sets no head_input; scan sets no pre_ln (big_vision's unscanned loop does).
  T.eq(got({pool_type = "none", num_classes = 3}), want({"encoder/pre_ln", "logits", "logits_2d"}))
  T.eq(got({pool_type = "0", scan = true}), want({"head_input"}))
end)

T.test("vit: pre_logits, pre_logits_2d and logits_2d by their definitions", function()
  local x = bv.randn({2, 12, 12, 3}, bv.rng(2))
  for _, pool in ipairs({"gap", "map", "tok", "0", "none"}) do
    for _, rep in ipairs({false, 8}) do
      local what = string.format("pool_type=%s rep_size=%s: ", pool, tostring(rep))
      local m, p = vit({pool_type = pool, rep_size = rep, num_classes = 5})
      local logits, out = m:apply(p, x)
      -- x_2d: the encoded tokens, without tok's cls token, on the 3x3 patch grid.
      local tokens = pool == "tok" and out.encoded:narrow(2, 2, 9) or out.encoded
      local x_2d = tokens:reshape({2, 3, 3, 32})
      local pre_2d = rep and dense(p, "pre_logits", x_2d):tanh() or x_2d
      close(out.pre_logits_2d, pre_2d, what .. "pre_logits_2d")
      close(out.logits_2d, dense(p, "head", out.pre_logits_2d), what .. "logits_2d")
      -- pre_logits is what the head reads: logits = head(pre_logits).
      close(logits, dense(p, "head", out.pre_logits), what .. "head(pre_logits)")
      T.truthy(logits == out.logits, what .. "logits")
      if pool == "none" then
        T.eq(out.head_input, nil)
        close(out.pre_logits_2d, out.pre_logits:reshape({2, 3, 3, rep or 32}), what .. "grid")
      else
        local pre = rep and dense(p, "pre_logits", out.head_input):tanh() or out.head_input
        close(out.pre_logits, pre, what .. "pre_logits")
        if not rep then T.truthy(out.pre_logits == out.head_input, what .. "the head's input") end
      end
    end
  end
end)

T.test("vit: the encoder's per-block outputs, unscanned and scanned (remat)", function()
  local x = bv.randn({2, 12, 12, 3}, bv.rng(2))
  local m, p = vit({pool_type = "gap", num_classes = 5})
  local _, out = m:apply(p, x)
  for i = 0, 1 do
    local b = string.format("encoder/block%02d/", i)
    local input = i == 0 and out.with_posemb or out["encoder/block00/+mlp"]
    close(out[b .. "+sa"], input + out[b .. "sa"], b .. "+sa = x + sa")
    close(out[b .. "+mlp"], out[b .. "+sa"] + out[b .. "mlp"], b .. "+mlp = +sa + mlp")
  end
  T.truthy(out["encoder/pre_ln"] == out["encoder/block01/+mlp"], "pre_ln: the last block's")
  -- A scanned encoder under training with gradients is rematerialised: its blocks' inner values
  -- are computed again when read, and are the same.
  local s = bv.models.build("vit", {variant = "mu/4", depth = 2, image_size = 12, scan = true,
                                    pool_type = "gap", num_classes = 5})
  local sp = {}
  for name, t in pairs(p) do
    local stacked = name:match("^Transformer/encoderblock_0/(.*)$")
    if stacked then
      sp["Transformer/encoderblock/" .. stacked] = bv.stack({t, p["Transformer/encoderblock_1/"
                                                               .. stacked]})
    elseif not name:match("^Transformer/encoderblock_1/") then
      sp[name] = t
    end
  end
  local logits, sout = s:apply(sp, x, {train = true})
  close(logits, out.logits, "scanned logits")
  for _, k in ipairs(keys(out)) do
    if k:match("^encoder/block") then close(sout[k], out[k], "scanned " .. k) end
  end
end)

T.test("vit parity: pre_logits, pre_logits_2d and logits_2d against the reference", function()
  local PY = T.python("numpy, torch")
  local tmp = os.tmpname()
  os.remove(tmp)
  bv.fs.mkdirs(tmp)
  for _, pool in ipairs({"map", "tok", "gap"}) do
    local cfg = {variant = "mu/4", depth = 2, num_classes = 5, image_size = 16, pool_type = pool,
                 rep_size = pool == "tok"}
    local m = bv.models.build("vit", cfg)
    local p = randomize(m:init(0), 1)
    local x = bv.randn({2, 16, 16, 3}, bv.rng(2))
    local file = {_input = x}
    for k, v in pairs(p) do file[k] = v end
    local npz, res = tmp .. "/params.npz", tmp .. "/out.npz"
    os.remove(res)
    bv.ckpt.save_npz(npz, file)
    local cmd = string.format("%s tests/reference/vit_reference.py %s '%s' %s", PY, npz,
                              json.encode({num_heads = 2, depth = 2, pool_type = pool}), res)
    T.truthy(os.execute(cmd) == true, "reference failed: " .. cmd)
    local want = bv.ckpt.load_npz(res)
    local logits, out = m:apply(p, x)
    out.logits = logits
    for _, k in ipairs({"logits", "pre_logits", "pre_logits_2d", "logits_2d"}) do
      T.eq(out[k]:shape(), want[k]:shape(), pool .. " " .. k .. " shape")
      local err = (out[k]:to("float64") - want[k]):abs():max():item() / want[k]:abs():max():item()
      T.truthy(err < 1e-5, string.format("vit %s %s: relative error %.3g >= 1e-5", pool, k, err))
    end
  end
end)

T.test("two towers: img/..., txt/..., norms, t = exp(t/parameter), b", function()
  local m = bv.models.build("proj.image_text.two_towers", {
    image = {variant = "mu/4", image_size = 8, depth = 1, pool_type = "map"},
    text = {variant = "mu", vocab_size = 20, text_len = 5}, out_dim = {6, 6},
    temperature_init = 10, bias_init = -10})
  local p = randomize(m:init(0), 3)
  local images = bv.randn({3, 8, 8, 3}, bv.rng(2))
  local texts = bv.tensor({{1, 2, 3, 4, 1}, {2, 3, 4, 5, 1}, {5, 5, 5, 5, 1}, {1, 1, 1, 1, 1}})
  local logits, out = m:apply(p, images, texts)
  -- The towers' own outputs, nested as big_vision nests them.
  local img = bv.models.build("vit", {variant = "mu/4", image_size = 8, depth = 1,
                                      pool_type = "map", num_classes = 6})
  local ip = {}
  for name, t in pairs(p) do
    local sub = name:match("^img/(.*)$")
    if sub then ip[sub] = t end
  end
  local ilogits, iout = img:apply(ip, images)
  for k, v in pairs(iout) do T.truthy(out["img/" .. k] == v, "img/" .. k) end
  for _, k in ipairs({"txt/logits", "txt/pre_logits", "txt/transformed"}) do
    T.truthy(bv.is_tensor(out[k]), k)
  end
  T.truthy(out["img/norm"] == ilogits:norm(2, true), "img/norm")
  close(out["img/normalized"], ilogits / (out["img/norm"] + 1e-8), "img/normalized")
  T.truthy(out.zimg == out["img/normalized"] and out.ztxt == out["txt/normalized"], "zimg, ztxt")
  close(out["txt/normalized"], out["txt/logits"] / (out["txt/norm"] + 1e-8), "txt/normalized")
  T.truthy(out["t/parameter"] == p.t, "t/parameter: the parameter")
  T.truthy(out.t == p.t:exp(), "t = exp(t/parameter)")
  T.truthy(out.b == p.b, "b: the parameter")
  close(logits, out.zimg:matmul(out.ztxt:transpose(1, 2)) * out.t + out.b, "logits")
  -- Without bias_init there is no b.
  local nob = bv.models.build("proj.image_text.two_towers", {
    image = {variant = "mu/4", image_size = 8, depth = 1}, text = {variant = "mu", vocab_size = 20,
    text_len = 5}, out_dim = 6})
  local _, nout = nob:apply(nob:init(0), images, texts)
  T.eq(nout.b, nil)
  T.truthy(bv.is_tensor(nout.t) and bv.is_tensor(nout["t/parameter"]), "t without b")
end)

-- A text tower's keys as big_vision's text_transformer._Model sets them: embedded, the Encoder's
-- out dict spread at the top level (blockNN/..., pre_ln without scan), transformed,
-- vocab_logits, pre_logits and, with num_classes, logits.
local function text_keys(depth, scan, head)
  local out = {"embedded", "transformed", "vocab_logits", "pre_logits"}
  for i = 0, depth - 1 do
    for _, k in ipairs({"sa", "+sa", "mlp", "+mlp"}) do
      out[#out + 1] = string.format("block%02d/%s", i, k)
    end
  end
  if not scan then out[#out + 1] = "pre_ln" end
  if head then out[#out + 1] = "logits" end
  table.sort(out)
  return out
end

local TEXTS = bv.tensor({{1, 2, 3, 4, 1}, {2, 3, 4, 5, 1}, {5, 5, 5, 5, 1}, {1, 1, 1, 1, 1}})

T.test("text transformer: the out dict's keys, as big_vision's _Model sets them", function()
  for _, scan in ipairs({false, true}) do
    for _, head in ipairs({false, true}) do
      local m = bv.models.build("proj.image_text.text_transformer", {
        variant = "mu", depth = 2, vocab_size = 20, text_len = 5, scan = scan,
        num_classes = head and 6 or nil})
      local _, out = m:apply(m:init(0), TEXTS)
      T.eq(keys(out), text_keys(2, scan, head))
    end
  end
end)

T.test("text transformer: embedded, blocks, transformed, vocab_logits by their definitions",
       function()
  local m = bv.models.build("proj.image_text.text_transformer", {
    variant = "mu", depth = 2, vocab_size = 20, text_len = 5, num_classes = 6})
  local p = randomize(m:init(0), 4)
  local logits, out = m:apply(p, TEXTS)
  local tbl = p["Embed_0/embedding"]
  local rows = {}
  for i, row in ipairs(TEXTS:totable()) do
    local toks = {}
    for j, tok in ipairs(row) do toks[j] = tbl[math.tointeger(tok) + 1] end
    rows[i] = bv.stack(toks)
  end
  T.truthy(out.embedded == bv.stack(rows), "embedded: the token embeddings, before pos_embedding")
  close(out["block00/+sa"], out.embedded + p.pos_embedding + out["block00/sa"], "block00/+sa")
  close(out["block01/+sa"], out["block00/+mlp"] + out["block01/sa"], "block01/+sa")
  close(out["block01/+mlp"], out["block01/+sa"] + out["block01/mlp"], "block01/+mlp")
  T.truthy(out.pre_ln == out["block01/+mlp"], "pre_ln: the last block's")
  -- transformed: the encoder_norm of pre_ln.
  local x = out.pre_ln
  local mean = x:mean(3, true)
  local var = ((x - mean) * (x - mean)):mean(3, true)
  local normed = (x - mean) / (var + 1e-6):sqrt() * p["Encoder_0/encoder_norm/scale"]
    + p["Encoder_0/encoder_norm/bias"]
  close(out.transformed, normed, "transformed", 1e-4)
  -- vocab_logits: flax's Embed.attend, the transformed tokens against the embedding table.
  close(out.vocab_logits, out.transformed:matmul(tbl:transpose(1, 2)), "vocab_logits")
  T.eq(out.vocab_logits:shape(), {4, 5, 20})
  T.truthy(out.pre_logits == out.transformed:select(2, 5), "pre_logits: the last token (pool last)")
  close(logits, dense(p, "head", out.pre_logits), "logits = head(pre_logits)")
end)

local function towers(bias)
  return bv.models.build("proj.image_text.two_towers", {
    image = {variant = "mu/4", image_size = 8, depth = 1, pool_type = "map"},
    text = {variant = "mu", depth = 1, vocab_size = 20, text_len = 5}, out_dim = {6, 6},
    temperature_init = 10, bias_init = bias})
end

-- big_vision's two_towers out keys: each tower's under img/ or txt/ with its norm and
-- normalized (only for the towers that ran), t, t/parameter and, with bias_init, b; bvlua adds
-- zimg and ztxt beside them.
local function towers_keys(image, text, bias)
  local out = {"t", "t/parameter"}
  if bias then out[#out + 1] = "b" end
  if image then
    local img = {"stem", "with_posemb", "encoder/block00/sa", "encoder/block00/+sa",
                 "encoder/block00/mlp", "encoder/block00/+mlp", "encoder/pre_ln", "encoded",
                 "head_input", "pre_logits", "pre_logits_2d", "logits", "logits_2d", "norm",
                 "normalized"}
    for _, k in ipairs(img) do out[#out + 1] = "img/" .. k end
    out[#out + 1] = "zimg"
  end
  if text then
    local txt = text_keys(1, false, true)
    txt[#txt + 1] = "norm"
    txt[#txt + 1] = "normalized"
    for _, k in ipairs(txt) do out[#out + 1] = "txt/" .. k end
    out[#out + 1] = "ztxt"
  end
  table.sort(out)
  return out
end

T.test("two towers: the out dict's keys for both towers, images only and texts only", function()
  local images = bv.randn({3, 8, 8, 3}, bv.rng(2))
  for _, bias in ipairs({-10, false}) do
    local m = towers(bias or nil)
    local p = m:init(0)
    local _, both = m:apply(p, images, TEXTS)
    T.eq(keys(both), towers_keys(true, true, bias))
    local _, img = m:apply(p, images)
    T.eq(keys(img), towers_keys(true, false, bias))
    local _, img_nil = m:apply(p, images, nil, {train = false})
    T.eq(keys(img_nil), towers_keys(true, false, bias))
    local _, txt = m:apply(p, nil, TEXTS)
    T.eq(keys(txt), towers_keys(false, true, bias))
  end
end)

T.test("two towers: one tower's call gives the numbers of the full call", function()
  local m = towers(-10)
  local p = randomize(m:init(0), 3)
  local images = bv.randn({3, 8, 8, 3}, bv.rng(2))
  local _, both = m:apply(p, images, TEXTS)
  local zimg, img = m:apply(p, images)
  T.truthy(zimg == both.zimg and img.zimg == both.zimg, "images only: zimg")
  T.eq(img.ztxt, nil)
  local ztxt, txt = m:apply(p, nil, TEXTS, {train = false})
  T.truthy(ztxt == both.ztxt and txt.ztxt == both.ztxt, "texts only: ztxt")
  T.eq(txt.zimg, nil)
  for k, v in pairs(both) do
    local one = k:match("^img/") and img or k:match("^txt/") and txt
    if one then T.truthy(one[k] == v, k) end
    if not one and k ~= "zimg" and k ~= "ztxt" then
      T.truthy(img[k] == v and txt[k] == v, k .. " (in both one-tower calls)")
    end
  end
  -- What zero-shot classification computes from the two calls is the full call's logits.
  local logits = both.zimg:matmul(both.ztxt:transpose(1, 2)) * both.t + both.b
  close(zimg:matmul(ztxt:transpose(1, 2)) * img.t + img.b, logits, "logits from one-tower calls")
end)

T.test("two towers: errors for no input, and nil for models that take no None", function()
  local m = towers(-10)
  local p = m:init(0)
  T.raises(function() m:apply(p, nil, nil) end, "two_towers: neither images nor texts were given")
  T.raises(function() m:apply(p) end, "two_towers: inputs are images, texts or both")
  local images = bv.randn({3, 8, 8, 3}, bv.rng(2))
  T.raises(function() m:apply(p, images, TEXTS, images) end, "got 3 inputs")
  local v = bv.models.build("vit", {variant = "mu/4", image_size = 8, depth = 1})
  T.raises(function() v:apply(v:init(0), nil) end, "vit: input 1 is nil")
  T.raises(function() m:loss_and_grads(p, {image = images, labels = bv.zeros({3, 6})}) end,
           "proj.image_text.two_towers has no classification step")
end)

T.run()
