-- Numerical parity: tiny ViT, BiT and Gemma forward passes against independent PyTorch
-- implementations (tests/reference/*.py, on the torch wheel in .venv) fed the same npz, within
-- 1e-5 relative error in float32 (bvlua) against float64 (the reference).
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local PY = T.python("numpy, torch")
local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

-- Every parameter replaced by random values, so zero-initialised heads and norms can't hide a
-- difference.
local function randomize(params, seed)
  local rng, out = bv.rng(seed), {}
  local names = {}
  for name in pairs(params) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    out[name] = bv.randn(params[name]:shape(), rng) * 0.3
  end
  return out
end

-- Runs the reference script on params + extra inputs and returns its logits.
local function reference(script, params, extra, cfg)
  local file = {}
  for k, v in pairs(params) do file[k] = v end
  for k, v in pairs(extra) do file[k] = v end
  local npz, out = tmp .. "/params.npz", tmp .. "/out.npz"
  os.remove(out)
  bv.ckpt.save_npz(npz, file)
  local cmd = string.format("%s tests/reference/%s %s '%s' %s", PY, script, npz, json.encode(cfg), out)
  T.truthy(os.execute(cmd) == true, "reference failed: " .. cmd)
  return bv.ckpt.load_npz(out).logits
end

local function check_close(name, got, want)
  T.eq(got:shape(), want:shape(), name .. " shape")
  local err = (got:to("float64") - want):abs():max():item() / want:abs():max():item()
  print(string.format("%s: max relative error %.2e", name, err))
  T.truthy(err < 1e-5, string.format("%s: relative error %.3g >= 1e-5", name, err))
end

T.test("ViT parity (map and tok pooling)", function()
  for _, pool in ipairs({"map", "tok"}) do
    local cfg = {variant = "mu/4", depth = 2, num_classes = 5, image_size = 16, pool_type = pool,
                 rep_size = pool == "tok"}
    local m = bv.models.build("vit", cfg)
    local p = randomize(m:init(0), 1)
    local x = bv.randn({2, 16, 16, 3}, bv.rng(2))
    local want = reference("vit_reference.py", p, {_input = x},
                           {num_heads = 2, depth = 2, pool_type = pool})
    check_close("vit " .. pool, m:apply(p, x), want)
  end
end)

T.test("BiT parity", function()
  local m = bv.models.build("bit", {depth = {1, 2}, width = 0.5, num_classes = 4})
  local p = randomize(m:init(0), 3)
  local x = bv.randn({2, 35, 29, 3}, bv.rng(4))
  check_close("bit", m:apply(p, x), reference("bit_reference.py", p, {_input = x}, {blocks = {1, 2}}))
end)

T.test("Gemma parity", function()
  local cfg = {width = 32, depth = 2, mlp_dim = 48, num_heads = 4, num_kv_heads = 2, head_dim = 8,
               vocab_size = 40}
  local m = bv.models.build("ppp.gemma", cfg)
  local p = randomize(m:init(0), 5)
  local tokens = bv.tensor({{1, 5, 9, 2, 33, 7}, {0, 3, 3, 8, 39, 12}})
  check_close("gemma", m:apply(p, tokens), reference("gemma_reference.py", p, {_tokens = tokens}, cfg))
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
