-- bv.models: parameter trees with big_vision's names and shapes, counts without allocating,
-- the scanned and per-layer forms, and the failure modes.
local T = require "tests.lua.lib.testing"

local function shapes(m)
  local out = {}
  for _, s in ipairs(m:param_shapes()) do out[s.name] = s.shape end
  return out
end

T.test("ViT-B/16 with 1000 classes: names, shapes and count", function()
  local m = bv.models.build("vit", {variant = "B/16", num_classes = 1000})
  local s = shapes(m)
  T.eq(s["embedding/kernel"], {16, 16, 3, 768})
  T.eq(s["pos_embedding"], {1, 196, 768})
  T.eq(s["Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/kernel"], {768, 12, 64})
  T.eq(s["Transformer/encoderblock_11/MultiHeadDotProductAttention_0/out/kernel"], {12, 64, 768})
  T.eq(s["Transformer/encoderblock_11/MlpBlock_0/Dense_0/kernel"], {768, 3072})
  T.eq(s["Transformer/encoder_norm/scale"], {768})
  T.eq(s["head/kernel"], {768, 1000})
  T.eq(s["cls"], nil)  -- gap pooling has no class token
  -- timm's vit_base_patch16_224 has 86,567,656 parameters including a class token (768) and
  -- its position embedding (768), which big_vision's gap model does not have.
  T.eq(m:param_count(), 86567656 - 768 - 768)
  T.eq(m:param_shapes()[1].name, "Transformer/encoder_norm/bias")  -- sorted like big_vision
  T.eq(m:param_shapes()[1].dtype, "float32")
end)

T.test("So400m/14 with a MAP head, and the other variants", function()
  local m = bv.models.build("vit", {variant = "So400m/14", pool_type = "map"})
  local s = shapes(m)
  T.eq(s["embedding/kernel"], {14, 14, 3, 1152})
  T.eq(s["pos_embedding"], {1, 256, 1152})
  T.eq(s["MAPHead_0/probe"], {1, 1, 1152})
  T.eq(s["MAPHead_0/MlpBlock_0/Dense_0/kernel"], {1152, 4304})
  T.eq(s["Transformer/encoderblock_26/LayerNorm_1/scale"], {1152})
  T.eq(s["head/kernel"], nil)
  -- Count by formula: embedding + posemb + 27 blocks + encoder_norm + MAP head.
  local d, mlp = 1152, 4304
  local attn = 4 * d * d + 4 * d
  local block = 2 * 2 * d + attn + (d * mlp + mlp) + (mlp * d + d)
  local head = d + attn + 2 * d + (d * mlp + mlp) + (mlp * d + d)
  T.eq(m:param_count(), (14 * 14 * 3 * d + d) + 256 * d + 27 * block + 2 * d + head)
  for _, v in ipairs({"mu", "Ti", "S", "M", "B", "L", "H", "g", "g-opt", "G", "G-opt", "e"}) do
    T.truthy(bv.models.build("vit", {variant = v .. "/14"}):param_count() > 0, v)
  end
  local tok = shapes(bv.models.build("vit", {variant = "S/32", pool_type = "tok", rep_size = true,
                                             num_classes = 10, image_size = {64, 96}}))
  T.eq(tok["cls"], {1, 1, 384}); T.eq(tok["pos_embedding"], {1, 6, 384})
  T.eq(tok["pre_logits/kernel"], {384, 384}); T.eq(tok["head/kernel"], {384, 10})
  T.eq(shapes(bv.models.build("vit", {variant = "S/16", posemb = "sincos2d"}))["pos_embedding"], nil)
end)

T.test("scanned form: stacked names, and the same outputs as the per-layer form", function()
  local cfg = {variant = "mu/4", depth = 3, num_classes = 4, image_size = 8, pool_type = "map"}
  local m = bv.models.build("vit", cfg)
  local scfg = {}
  for k, v in pairs(cfg) do scfg[k] = v end
  scfg.scan = true
  local ms = bv.models.build("vit", scfg)
  local s = shapes(ms)
  T.eq(s["Transformer/encoderblock/MlpBlock_0/Dense_0/kernel"], {3, 32, 128})
  T.eq(s["Transformer/encoderblock_0/LayerNorm_0/scale"], nil)
  local p = m:init(1)
  local ps = {}
  for name, t in pairs(p) do
    local rest = name:match("^Transformer/encoderblock_0/(.*)$")
    if rest then
      local layers = {}
      for i = 0, 2 do layers[i + 1] = p["Transformer/encoderblock_" .. i .. "/" .. rest] end
      ps["Transformer/encoderblock/" .. rest] = bv.stack(layers)
    elseif not name:find("^Transformer/encoderblock_") then
      ps[name] = t
    end
  end
  p["head/kernel"] = bv.randn({32, 4}, bv.rng(2))  -- the zero-initialised head would hide a bug
  ps["head/kernel"] = p["head/kernel"]
  local x = bv.randn({2, 8, 8, 3}, bv.rng(3))
  T.truthy(m:apply(p, x):allclose(ms:apply(ps, x), 1e-5, 1e-6), "scan == per-layer")
end)

T.test("init is seeded and follows big_vision's initialisers", function()
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 3, image_size = 8})
  local a, b = m:init(7), m:init(7)
  for name, t in pairs(a) do T.truthy(t == b[name], name) end
  T.truthy(not (m:init(8)["embedding/kernel"] == a["embedding/kernel"]), "another seed")
  T.eq(a["head/kernel"]:abs():sum():item(), 0.0)  -- head_zeroinit
  T.eq(a["Transformer/encoderblock_0/LayerNorm_0/scale"]:min():item(), 1.0)
  local q = a["Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/kernel"]
  T.truthy(q:abs():max():item() <= math.sqrt(6 / 64), "xavier_uniform limit sqrt(6/(32+32))")
  local emb = a["embedding/kernel"]  -- lecun_normal truncated at 2 std
  T.truthy(emb:abs():max():item() <= 2 * math.sqrt(1 / 48) / 0.87962566103423978 + 1e-6, "truncated")
end)

T.test("apply: outputs and intermediate values", function()
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 5, image_size = 16, pool_type = "tok"})
  local p = m:init(0)
  local logits, out = m:apply(p, bv.randn({2, 16, 16, 3}), {train = false})
  T.eq(logits:shape(), {2, 5})
  T.eq(out.stem:shape(), {2, 4, 4, 32})
  T.eq(out.encoded:shape(), {2, 17, 32})
  T.eq(out["encoder/block00/+mlp"]:shape(), {2, 17, 32})  -- out["encoder"]["block00"]["+mlp"]
  local feats = bv.models.build("vit", {variant = "mu/4", image_size = 16, pool_type = "none"})
  T.eq(feats:apply(feats:init(0), bv.zeros({1, 16, 16, 3})):shape(), {1, 16, 32})
end)

T.test("BiT: R50x1 count, shapes, outputs", function()
  local m = bv.models.build("bit", {depth = 50, num_classes = 1000})
  -- The same network as torchvision's resnet50 (v1.5 strides, projection shortcuts) with
  -- GroupNorm in place of BatchNorm: 25,557,032 parameters.
  T.eq(m:param_count(), 25557032)
  local s = shapes(m)
  T.eq(s["conv_root/kernel"], {7, 7, 3, 64})
  T.eq(s["block1/unit1/conv_proj/kernel"], {1, 1, 64, 256})
  T.eq(s["block2/unit1/conv2/kernel"], {3, 3, 128, 128})
  T.eq(s["block4/unit3/gn3/scale"], {2048})
  T.eq(s["block2/unit2/conv_proj/kernel"], nil)
  T.eq(s["head/kernel"], {2048, 1000})
  T.eq(#bv.models.build("bit", {depth = 26}):param_shapes() > 0, true)
  local t = bv.models.build("bit", {depth = {1, 1}, width = 0.5, num_classes = 3})
  local p = t:init(0)
  T.eq(p["block1/unit1/gn3/scale"]:abs():sum():item(), 0.0)  -- gn3's scale starts at zero
  local y, out = t:apply(p, bv.randn({2, 33, 31, 3}, bv.rng(1)))
  T.eq(y:shape(), {2, 3})
  T.eq(out.stem:shape(), {2, 9, 8, 32})       -- SAME: ceil(33/2)=17 -> ceil(17/2)=9
  T.eq(out.stage2:shape(), {2, 5, 4, 256})
  T.raises(function() bv.models.build("bit", {depth = 34}) end, "unknown depth 34")
  T.raises(function() bv.models.build("bit", {depth = 26, width = 0.3}) end,
           "bit: width 0.3 gives the root conv int(64 * width) = 19 channels, which GroupNorm's "
           .. "32 groups must divide")
  T.raises(function() bv.models.build("bit", {depth = 26, width = "1"}) end,
           "bit: width must be a positive number, got \"1\"")
end)

T.test("BiT keeps conv kernels in OIHW memory; relayout puts loaded ones back", function()
  local m = bv.models.build("bit", {depth = {1, 1}, width = 0.5, num_classes = 3})
  local p = m:init(0)
  local name = "block2/unit1/conv2/kernel"
  T.eq(p[name]:shape(), {3, 3, 64, 64})  -- flax's HWIO shape...
  T.eq(p[name]:is_contiguous(), false)   -- ...over OIHW memory
  T.eq(p["head/kernel"]:is_contiguous(), true)
  local x = bv.randn({2, 16, 16, 3}, bv.rng(1))
  local want = m:apply(p, x)
  local rowmajor = {}  -- what a checkpoint or model_init gives back
  for n, t in pairs(p) do rowmajor[n] = t:contiguous() end
  T.eq(rowmajor[name]:is_contiguous(), true)
  T.truthy((m:apply(rowmajor, x) - want):abs():max():item() < 1e-5, "same outputs either way")
  T.truthy(m:relayout(rowmajor) == rowmajor, "relayout returns the table")
  T.eq(rowmajor[name]:is_contiguous(), false)
  T.truthy(rowmajor[name] == p[name], "values unchanged")
  T.truthy(m:apply(rowmajor, x) == want, "the same outputs as after init")
  local vit = bv.models.build("vit", {variant = "mu/4", image_size = 8})
  local vp = vit:init(0)
  vit:relayout(vp)  -- no preference: nothing changes
  T.eq(vp["embedding/kernel"]:is_contiguous(), true)
  T.raises(function() m:relayout({[name] = 3}) end, "is a number, not a tensor")
end)

T.test("Gemma: 2B count and shapes, tiny forward, scan and per-layer forms", function()
  local m = bv.models.build("ppp.gemma", {variant = "gemma_2b"})
  local s = shapes(m)
  T.eq(s["embedder/input_embedding"], {256000, 2048})
  T.eq(s["layers/attn/q_einsum/w"], {18, 8, 2048, 256})
  T.eq(s["layers/attn/kv_einsum/w"], {18, 2, 1, 2048, 256})
  T.eq(s["layers/attn/attn_vec_einsum/w"], {18, 8, 256, 2048})
  T.eq(s["layers/mlp/gating_einsum"], {18, 2, 2048, 16384})
  T.eq(s["layers/mlp/linear"], {18, 16384, 2048})
  T.eq(s["final_norm/scale"], {2048})
  T.eq(m:param_count(), 2506172416)  -- "Gemma 2B": 2.51 B with the tied embedding
  T.eq(shapes(bv.models.build("ppp.gemma", {variant = "gemma_7b"}))["layers/attn/qkv_einsum/w"],
       {28, 3, 16, 3072, 256})
  local cfg = {width = 32, depth = 2, mlp_dim = 64, num_heads = 4, num_kv_heads = 2, head_dim = 8,
               vocab_size = 50}
  local t = bv.models.build("ppp.gemma", cfg)
  local p = t:init(3)
  local tokens = bv.tensor({{1, 2, 3, 4}, {5, 6, 7, 8}})
  local logits, out = t:apply(p, tokens)
  T.eq(logits:shape(), {2, 4, 50})
  T.eq(out.pre_logits:shape(), {2, 4, 32})
  -- causal: changing a later token leaves earlier logits unchanged
  local later = t:apply(p, bv.tensor({{1, 2, 3, 9}, {5, 6, 7, 8}}))
  T.truthy(later[{1, {1, 3}}]:allclose(logits[{1, {1, 3}}], 1e-5, 1e-6), "causal mask")
  T.truthy(not later[{1, 4}]:allclose(logits[{1, 4}]), "the last position sees the change")
  cfg.scan = false
  local pl = {}
  for name, v in pairs(p) do
    local rest = name:match("^layers/(.*)$")
    if rest then
      for i = 0, 1 do pl["layers/" .. i .. "/" .. rest] = v[i + 1] end
    else
      pl[name] = v
    end
  end
  local per_layer = bv.models.build("ppp.gemma", cfg)
  T.truthy(per_layer:apply(pl, tokens):allclose(logits, 1e-5, 1e-6), "per-layer == scanned")
  T.raises(function() bv.models.build("ppp.gemma", {variant = "gemma_3b"}) end, "unknown variant 'gemma_3b'")
  T.raises(function() t:apply(p, bv.zeros({2, 4})) end, "tokens must be an integer")
end)

T.test("Gemma decoding with the KV cache gives the full forward pass's logits", function()
  local cfg = {width = 32, depth = 2, mlp_dim = 48, num_heads = 4, num_kv_heads = 2, head_dim = 8,
               vocab_size = 30}
  local m = bv.models.build("ppp.gemma", cfg)
  local p = m:init(4)
  for name, t in pairs(p) do p[name] = bv.randn(t:shape(), bv.rng(#name)) * 0.3 end
  local seq = bv.tensor({{3, 7, 1, 9, 4, 11, 2}, {5, 5, 8, 2, 6, 1, 0}})
  local full = m:apply(p, seq)                        -- [2, 7, 30]
  local logits, cache = m:prefill(p, seq[{{}, {1, 3}}], {max_len = 8})
  T.truthy(logits:allclose(full[{{}, {1, 3}}], 1e-5, 1e-5), "prefill == the first 3 positions")
  for t = 4, 7 do
    local step = m:extend(p, cache, seq[{{}, t}])
    T.truthy(step:allclose(full[{{}, t}], 1e-4, 1e-5), "extend == position " .. t)
  end
  T.eq(cache:length(), 7)
  T.raises(function() m:extend(p, cache, bv.tensor({1, 2})); m:extend(p, cache, bv.tensor({1, 2})) end,
           "raise max_len")
  -- left padding: a padded row decodes like the same row without padding
  local padded, pcache = m:prefill(p, bv.tensor({{0, 0, 3, 7, 1}}), {max_len = 8,
    input_mask = bv.tensor({{false, false, true, true, true}})})
  T.truthy(padded[{1, 5}]:allclose(full[{1, 3}], 1e-4, 1e-5), "padding takes no position")
  T.truthy(m:extend(p, pcache, bv.tensor({9})):allclose(full[{{1}, 4}], 1e-4, 1e-5), "then extend")
  T.raises(function() bv.models.build("vit", {}):prefill({}, seq) end, "vit does not decode")
  -- cache_dtype = "bfloat16" (big_vision's knob): keys and values stored in bf16, close to the
  -- float32 cache's logits but not equal.
  cfg.cache_dtype = "bfloat16"
  local m16 = bv.models.build("ppp.gemma", cfg)
  local l16, c16 = m16:prefill(p, seq[{{}, {1, 3}}], {max_len = 8})
  local step16 = m16:extend(p, c16, seq[{{}, 4}])
  T.truthy(not l16:equal(logits), "bf16 cache changed nothing")  -- the prompt reads it too
  T.truthy(l16:allclose(full[{{}, {1, 3}}], 0.05, 0.05), "bf16 cache far off in prefill")
  T.truthy(step16:allclose(full[{{}, 4}], 0.05, 0.05), "bf16 cache far off in extend")
end)

T.device_test("Gemma decoding on a device: prefill's own masks go to the tokens' device",
              function(device)
  local m = bv.models.build("ppp.gemma", {width = 32, depth = 2, mlp_dim = 48, num_heads = 4,
                                          num_kv_heads = 2, head_dim = 8, vocab_size = 30})
  local p = m:init(4)
  for name, t in pairs(p) do p[name] = bv.randn(t:shape(), bv.rng(#name)) * 0.3 end
  local seq = bv.tensor({{3, 7, 1}, {5, 5, 8}})
  local logits, cache = m:prefill(p, seq, {max_len = 8})
  local step = m:extend(p, cache, bv.tensor({9, 2}))
  local dp = {}
  for name, t in pairs(p) do dp[name] = t:to(device) end
  -- No input_mask given: prefill makes it, and the causal mask, itself.
  local dlogits, dcache = m:prefill(dp, seq:to(device), {max_len = 8})
  T.eq(dlogits:device(), device)
  T.truthy(dlogits:to("cpu"):allclose(logits, 1e-4, 1e-5), "prefill on the device == on the host")
  local dstep = m:extend(dp, dcache, bv.tensor({9, 2}):to(device))
  T.eq(dstep:device(), device)
  T.truthy(dstep:to("cpu"):allclose(step, 1e-4, 1e-5), "extend on the device == on the host")
end)

T.test("PaliGemma: 3B count and shapes, the prefix-LM mask", function()
  local m = bv.models.build("proj.paligemma.paligemma", {})
  T.eq(m:param_count(), 2923335408)  -- PaliGemma-3B as published
  local s = shapes(m)
  T.eq(s["img/head/kernel"], {1152, 2048})
  T.eq(s["img/Transformer/encoderblock/MlpBlock_0/Dense_0/kernel"], {27, 1152, 4304})
  T.eq(s["llm/embedder/input_embedding"], {257152, 2048})
  T.eq(s["img/MAPHead_0/probe"], nil)
  local t = bv.models.build("proj.paligemma.paligemma", {img = {variant = "mu/4", image_size = 8},
    llm = {width = 32, depth = 2, mlp_dim = 48, num_heads = 4, num_kv_heads = 1, head_dim = 8,
           vocab_size = 40}})
  local p = t:init(0)
  local img = bv.randn({1, 8, 8, 3}, bv.rng(1))
  local mask_ar = bv.tensor({{0, 0, 1, 1}})
  local logits, out = t:apply(p, img, bv.tensor({{1, 2, 3, 4}}), mask_ar)
  T.eq(logits:shape(), {1, 4, 40})
  local m8 = out.attn_mask[1]
  T.truthy(m8[{1, 6}]:item(), "an image token sees the text prefix (bidirectional prefix)")
  T.truthy(not m8[{1, 7}]:item() and not m8[{6, 7}]:item(), "nothing before sees the suffix")
  T.truthy(m8[{8, 7}]:item(), "the suffix is causal")
  -- Changing the last suffix token leaves the earlier positions' logits alone.
  local changed = t:apply(p, img, bv.tensor({{1, 2, 3, 9}}), mask_ar)
  T.truthy(changed[{1, {1, 3}}]:allclose(logits[{1, {1, 3}}], 1e-5, 1e-6), "causal suffix")
  -- Changing a prefix token changes the logits at the first prefix position (it sees it).
  local pre = t:apply(p, img, bv.tensor({{1, 7, 3, 4}}), mask_ar)
  T.truthy(not pre[{1, 1}]:allclose(logits[{1, 1}]), "bidirectional prefix")
  T.raises(function() bv.models.build("proj.paligemma.paligemma", {image = {}}) end,
           "unknown config key 'image'")
end)

T.test("SigLIP two towers: tree, init, logits", function()
  local cfg = {image = {variant = "B/16", pool_type = "map"}, text = {variant = "B", vocab_size = 32000},
               out_dim = {bv.null, 768}, temperature_init = 10, bias_init = -10}
  local m = bv.models.build("proj.image_text.two_towers", cfg)
  local s = shapes(m)
  T.eq(s["img/head/kernel"], nil)                 -- out_dim None: no image head
  T.eq(s["txt/head/kernel"], {768, 768})
  T.eq(s["txt/Embed_0/embedding"], {32000, 768})
  T.eq(s["txt/pos_embedding"], {1, 64, 768})
  T.eq(s["txt/Encoder_0/encoderblock_11/MlpBlock_0/Dense_1/kernel"], {3072, 768})
  T.eq(s.t, {1}); T.eq(s.b, {1})
  local img = bv.models.build("vit", {variant = "B/16", pool_type = "map"})
  local txt = bv.models.build("proj.image_text.text_transformer", {variant = "B", vocab_size = 32000,
                                                                   num_classes = 768})
  T.eq(m:param_count(), img:param_count() + txt:param_count() + 2)
  local tiny = bv.models.build("proj.image_text.two_towers", {image = {variant = "mu/4", image_size = 8},
    text = {variant = "mu", vocab_size = 20, text_len = 5}, out_dim = 6, temperature_init = 10, bias_init = -10})
  local p = tiny:init(0)
  T.near(p.t:item(), math.log(10), 1e-6); T.eq(p.b:item(), -10.0)
  p["img/head/kernel"] = bv.randn({32, 6}, bv.rng(1))
  local images = bv.randn({3, 8, 8, 3}, bv.rng(2))
  local texts = bv.tensor({{1, 2, 3, 4, 1}, {2, 3, 4, 5, 1}, {5, 5, 5, 5, 1}, {1, 1, 1, 1, 1}})
  local logits, out = tiny:apply(p, images, texts)
  T.eq(logits:shape(), {3, 4})
  T.near(out.zimg[2]:norm():item(), 1.0, 1e-5)
  local want = out.zimg:matmul(out.ztxt:transpose(1, 2)) * 10 - 10
  T.truthy(logits:allclose(want, 1e-5, 1e-5), "zimg @ ztxt^T * exp(t) + b")
  T.raises(function() bv.models.build("proj.image_text.two_towers", {text_model = "bert"}) end,
           "only text_model='proj.image_text.text_transformer'")
end)

T.test("vit dtype_mm: the encoder's matmuls in bfloat16, LayerNorms and head in float32", function()
  local x = bv.randn({2, 8, 8, 3}, bv.rng(1))
  local function run(dtype_mm, pool_type)
    local m = bv.models.build("vit", {variant = "mu/4", image_size = 8, num_classes = 3,
                                      head_zeroinit = false, dtype_mm = dtype_mm,
                                      pool_type = pool_type})
    local p = m:init(0)
    return m:apply(p, x, {train = false})
  end
  for _, pool in ipairs({"gap", "map"}) do
    local l32, o32 = run("float32", pool)
    local l16, o16 = run("bfloat16", pool)
    T.eq(l16:dtype(), "float32")  -- the head's output
    T.eq(o16.encoded:dtype(), "float32")  -- the residual stream and the final LayerNorm
    T.truthy(not l16:equal(l32), pool .. ": dtype_mm changed nothing (not applied?)")
    local err = (l16 - l32):abs():max():item()
    T.truthy(err < 0.05 * l32:abs():max():item() + 1e-3, pool .. ": bf16 far off: " .. err)
  end
  -- The scope ends with the encoder: what runs afterwards is float32 again.
  local a = run("float32", "gap")
  T.truthy(a:equal(run("float32", "gap")), "float32 after a dtype_mm model")
end)

T.test("failure modes name the culprit", function()
  T.raises(function() bv.models.build("vitt", {}) end, "unknown model 'vitt' (known: vit")
  T.raises(function() bv.models.build("vit", {variant = "Q/16"}) end, "unknown variant 'Q/16'")
  T.raises(function() bv.models.build("vit", {variant = "B/16", pooltype = "map"}) end,
           "unknown config key 'pooltype'")
  T.raises(function() bv.models.build("vit", {pool_type = "max"}) end, "unknown pool_type 'max'")
  T.raises(function() bv.models.build("vit", {dtype_mm = "int8"}) end,
           'vit: dtype_mm="int8" is not one of "float32", "bfloat16", "float16"')
  -- Gemma's keys that are not implemented are refused unless at big_vision's defaults.
  local g = {variant = "gemma_2b", width = 16, depth = 1, mlp_dim = 32, num_heads = 2,
             num_kv_heads = 1, head_dim = 8, vocab_size = 32}
  local function gemma(extra)
    local cfg = {}
    for k, v in pairs(g) do cfg[k] = v end
    for k, v in pairs(extra) do cfg[k] = v end
    return bv.models.build("ppp.gemma", cfg)
  end
  gemma({dropout = 0, embed_dtype = "float32"})
  T.raises(function() gemma({dropout = 0.1}) end, "gemma: dropout=0.1 is not implemented")
  T.raises(function() gemma({cache_dtype = "int4"}) end,
           'gemma: cache_dtype="int4" is not one of "float32", "bfloat16", "float16"')
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 2, image_size = 8})
  local p = m:init(0)
  T.raises(function() m:apply(p, bv.zeros({1, 8, 8})) end, "images must be [n, H, W, 3]")
  T.raises(function() m:apply(p, bv.zeros({1, 16, 16, 3})) end, "pos_embedding has 4 tokens")
  p["head/bias"] = nil
  T.raises(function() m:apply(p, bv.zeros({1, 8, 8, 3})) end, "parameter 'head/bias' is missing")
end)

T.run()
