-- Model:load: big_vision's model_init (a path, "path.npz:subtree", vanity names), dont_load,
-- position-embedding resampling, scan/per-layer conversion, and the missing/unused report.
local T = require "tests.lua.lib.testing"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local function vit(extra)
  local cfg = {variant = "mu/4", depth = 2, num_classes = 3, image_size = 8}
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return bv.models.build("vit", cfg)
end

local function same(a, b)
  for name, t in pairs(a) do
    if not (b[name] and t == b[name]) then return false, name end
  end
  return true
end

T.test("a checkpoint of the same model loads exactly", function()
  local m = vit()
  local src = m:init(1)
  bv.ckpt.save_npz(tmp .. "/a.npz", src)
  local p, report = m:load(m:init(2), tmp .. "/a.npz")
  T.truthy(same(p, src), "all loaded")
  T.eq(#report.loaded, #m:param_shapes()); T.eq(report.missing, {}); T.eq(report.unused, {})
end)

T.device_test("loading copies into the model's own tensors, on their device", function(device)
  local m = vit()
  local src = m:init(1)
  bv.ckpt.save_npz(tmp .. "/on_device.npz", src)
  local fresh = m:init(2)
  local kernel = fresh["head/kernel"]
  for _, t in pairs(fresh) do t:move_to_(device) end
  local p = m:load(fresh, tmp .. "/on_device.npz")
  T.truthy(rawequal(p["head/kernel"], kernel), "the same tensor object, filled in place")
  for name, t in pairs(p) do
    T.eq(t:device(), device, name)
    T.truthy(t:to("cpu") == src[name], name .. " loaded")
  end
end)

T.test("a sub-tree ('path.npz:img') and dont_load", function()
  local m = vit()
  local src = m:init(1)
  local file = {}
  for name, t in pairs(src) do file["img/" .. name] = t end
  file["llm/other"] = bv.zeros({2})
  bv.ckpt.save_npz(tmp .. "/b.npz", file)
  local fresh = m:init(2)
  fresh["head/kernel"] = bv.ones({32, 3})
  local p = m:load(fresh, tmp .. "/b.npz:img", {dont_load = {"head/.*"}})
  T.truthy(p["head/kernel"] == fresh["head/kernel"], "dont_load keeps the fresh head")
  T.truthy(p["embedding/kernel"] == src["embedding/kernel"], "the rest comes from img/")
  T.raises(function() m:load(fresh, tmp .. "/b.npz:txt") end, "no parameters under 'txt/'")
  -- The whole two-tower file, without ':img': the error names the sub-tree to use.
  T.raises(function() m:load(fresh, tmp .. "/b.npz") end,
           "model_init '" .. tmp .. "/b.npz': none of the model's parameters is in the file, "
           .. "whose names sit under img/, llm/; 39 of its 39 are under 'img/': use '"
           .. tmp .. "/b.npz:img'")
end)

T.test("missing and unused parameters are errors unless allowed", function()
  local m = vit()
  local src = m:init(1)
  src["head/bias"] = nil
  src["extra/thing"] = bv.zeros({1})
  bv.ckpt.save_npz(tmp .. "/c.npz", src)
  T.raises(function() m:load(m:init(2), tmp .. "/c.npz", {allow_unused = true}) end,
           "1 parameter missing from the checkpoint")
  T.raises(function() m:load(m:init(2), tmp .. "/c.npz", {allow_missing = true}) end,
           "in the checkpoint not used by the model (allow with allow_unused): extra/thing")
  local p, report = m:load(m:init(2), tmp .. "/c.npz", {allow_missing = true, allow_unused = true})
  T.eq(report.missing, {"head/bias"}); T.eq(report.unused, {"extra/thing"})
  T.eq(p["head/bias"]:shape(), {3})
end)

T.test("pos_embedding is resampled when the grid differs; other shapes must match", function()
  local small = vit({image_size = 8})   -- 2x2 grid
  local src = small:init(1)
  bv.ckpt.save_npz(tmp .. "/d.npz", src)
  local big = vit({image_size = 12})    -- 3x3 grid
  local p, report = big:load(big:init(2), tmp .. "/d.npz")
  T.eq(report.resampled, {"pos_embedding"})
  T.eq(p.pos_embedding:shape(), {1, 9, 32})
  -- corner-aligned bilinear: the corners keep their values, the centre is the mean of all four
  T.truthy(p.pos_embedding[{1, 1}]:allclose(src.pos_embedding[{1, 1}]), "corner")
  T.truthy(p.pos_embedding[{1, 9}]:allclose(src.pos_embedding[{1, 4}]), "corner")
  T.truthy(p.pos_embedding[{1, 5}]:allclose(src.pos_embedding[1]:mean(1), 1e-5, 1e-6), "centre")
  local wide = vit({num_classes = 4})
  T.raises(function() wide:load(wide:init(0), tmp .. "/d.npz") end,
           "'head/bias' has shape {3} in the checkpoint but the model wants {4}")
end)

T.test("scanned and per-layer checkpoints load into either form", function()
  local m = vit()
  local src = m:init(1)
  bv.ckpt.save_npz(tmp .. "/e.npz", src)
  local scanned = vit({scan = true})
  local p = scanned:load(scanned:init(0), tmp .. "/e.npz")
  T.eq(p["Transformer/encoderblock/LayerNorm_0/scale"]:shape(), {2, 32})
  local x = bv.randn({1, 8, 8, 3}, bv.rng(0))
  src["head/kernel"] = bv.randn({32, 3}, bv.rng(1))
  p["head/kernel"] = src["head/kernel"]
  T.truthy(scanned:apply(p, x):allclose(m:apply(src, x), 1e-5, 1e-6), "same function")
  bv.ckpt.save_npz(tmp .. "/f.npz", p)
  local back = m:load(m:init(0), tmp .. "/f.npz")
  T.truthy(back["Transformer/encoderblock_1/MlpBlock_0/Dense_0/kernel"] ==
           src["Transformer/encoderblock_1/MlpBlock_0/Dense_0/kernel"], "scan -> per-layer")
end)

T.test("vanity names and missing files", function()
  if not os.getenv("BV_GEMMA_DIR") then
    T.raises(function() vit():load(vit():init(0), "pt_224") end, "BV_GEMMA_DIR is not set")
  end
  T.raises(function() vit():load(vit():init(0), tmp .. "/nope.npz") end,
           "model_init '" .. tmp .. "/nope.npz': no such file " .. tmp .. "/nope.npz")
  T.raises(function() vit():load(vit():init(0), "nope/x.npz:img") end,
           "model_init 'nope/x.npz:img': no such file nope/x.npz (relative to the current directory)")
end)

T.test("{img = ..., llm = ...}: each part from its own file", function()
  local m = bv.models.build("proj.paligemma.paligemma", {img = {variant = "mu/4", image_size = 8},
    llm = {width = 16, depth = 1, mlp_dim = 24, num_heads = 2, num_kv_heads = 1, head_dim = 8,
           vocab_size = 12}})
  local src = m:init(1)
  local img, llm = {}, {}
  for name, t in pairs(src) do
    local part, rest = name:match("^(%w+)/(.*)$")
    if part == "img" then img["img/" .. rest] = t else llm[rest] = t end
  end
  bv.ckpt.save_npz(tmp .. "/img.npz", img)   -- the image tower under img/, as in a PaliGemma file
  bv.ckpt.save_npz(tmp .. "/llm.npz", llm)   -- the LLM at the root
  local fresh = m:init(2)
  local p, report = m:load(fresh, {img = tmp .. "/img.npz:img", llm = tmp .. "/llm.npz"})
  T.truthy(same(src, p), "every parameter comes from the files")
  T.eq(#report.loaded, m:param_count() > 0 and #m:param_shapes() or 0)
  -- Only one part named: the other stays fresh; dont_load works inside the part.
  local q = m:load(fresh, {llm = tmp .. "/llm.npz"}, {dont_load = {"final_norm/.*"}})
  T.truthy(q["img/head/kernel"] == fresh["img/head/kernel"], "img stays fresh")
  T.truthy(q["llm/final_norm/scale"] == fresh["llm/final_norm/scale"], "dont_load kept it")
  T.truthy(q["llm/embedder/input_embedding"] == src["llm/embedder/input_embedding"], "llm loaded")
  T.raises(function() m:load(fresh, {txt = tmp .. "/llm.npz"}) end, "no parameters under 'txt/'")
  T.raises(function() m:load(fresh, {img = 3}) end, "must map part names to inits")
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
