-- The training step: big_vision's losses (bv.losses), model:loss_and_grads (one forward/loss/
-- backward call), gradient accumulation and mixup.
local T = require "tests.lua.lib.testing"
local losses = require "bv.losses"

local function model()
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 3, image_size = 8})
  local p = m:init(0)
  p["head/kernel"] = bv.randn({32, 3}, bv.rng(9)) * 0.1  -- a zero head gives zero input grads
  return m, p
end

T.test("losses match their formulas", function()
  local logits = bv.tensor({{2.0, -1.0, 0.5}, {0.0, 0.0, 0.0}})
  local labels = bv.tensor({{1.0, 0.0, 0.0}, {0.0, 0.5, 0.5}})
  local sm = losses.per_example_loss("softmax_xent", logits, labels)
  local lse = math.log(math.exp(2) + math.exp(-1) + math.exp(0.5))
  T.near(sm[1]:item(), lse - 2, 1e-6)
  T.near(sm[2]:item(), math.log(3), 1e-6)
  local sg = losses.per_example_loss("sigmoid_xent", logits, labels)
  local function softplus(x) return math.log(1 + math.exp(x)) end
  T.near(sg[1]:item(), softplus(-2) + softplus(-1) + softplus(0.5), 1e-6)
  T.near(sg[2]:item(), 3 * math.log(2), 1e-6)
  T.raises(function() losses.per_example_loss("hinge", logits, labels) end, "unknown loss 'hinge'")
  T.raises(function() losses.per_example_loss("softmax_xent", logits, bv.zeros({2, 4})) end,
           "logits [2x3] and labels [2x4] differ")
end)

T.test("a few steps of gradient descent lower the loss", function()
  local m, p = model()
  local x = bv.randn({4, 8, 8, 3}, bv.rng(1))
  local y = bv.tensor({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 0}}, "float32")
  local first, last
  for step = 1, 15 do
    local loss, g = m:loss_and_grads(p, {image = x, labels = y}, {loss = "softmax_xent"})
    loss = loss:item()  -- a scalar tensor on the parameters' device
    first = first or loss
    last = loss
    for k, v in pairs(g) do p[k]:copy_(p[k] - 0.1 * v) end
  end
  T.truthy(last < first * 0.5, string.format("loss %.3f -> %.3f", first, last))
end)

T.test("accum_steps gives the full batch's gradient", function()
  local m, p = model()
  local x = bv.randn({6, 8, 8, 3}, bv.rng(2))
  local y = bv.tensor({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, "float32")
  local l1, g1 = m:loss_and_grads(p, {image = x, labels = y})
  local l3, g3 = m:loss_and_grads(p, {image = x, labels = y}, {accum_steps = 3})
  T.near(l3:item(), l1:item(), 1e-6)
  for k, v in pairs(g1) do T.truthy(g3[k]:allclose(v, 1e-4, 1e-6), k) end
  T.raises(function() m:loss_and_grads(p, {image = x, labels = y}, {accum_steps = 4}) end,
           "not divisible by accum_steps 4")
end)

T.test("bf16 autocast: close to float32, not equal; gradients stay float32", function()
  local x = bv.randn({4, 8, 8, 3}, bv.rng(4))
  local y = bv.tensor({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 0}}, "float32")
  for _, name in ipairs({"vit", "bit"}) do
    local cfg = name == "vit" and {variant = "mu/4", num_classes = 3, image_size = 8}
                or {depth = {1}, width = 0.5, num_classes = 3}
    local m = bv.models.build(name, cfg)
    local p = m:init(0)
    p["head/kernel"] = bv.randn(p["head/kernel"]:shape(), bv.rng(9)) * 0.1
    local l32, g32 = m:loss_and_grads(p, {image = x, labels = y}, {loss = "softmax_xent"})
    local l16, g16 = m:loss_and_grads(p, {image = x, labels = y},
                                      {loss = "softmax_xent", autocast = "bfloat16"})
    l32, l16 = l32:item(), l16:item()
    T.truthy(l16 ~= l32, name .. ": bf16 gave exactly the float32 loss (autocast off?)")
    T.near(l16, l32, 0.02 * l32, name .. " loss")
    for k, g in pairs(g32) do
      T.eq(g16[k]:dtype(), "float32", k)
      -- Some gradients are ~0 in float32 (a key bias cannot change attention): absolute slack.
      local d = g16[k] - g
      local err, scale = math.sqrt((d * d):sum():item()), math.sqrt((g * g):sum():item())
      T.truthy(err <= 0.1 * scale + 1e-3, string.format("%s %s: %g vs %g", name, k, err, scale))
    end
    -- The scope ends with the step: a plain forward afterwards is float32 again.
    local again = m:loss_and_grads(p, {image = x, labels = y}, {loss = "softmax_xent"})
    T.eq(again:item(), l32)
  end
  T.raises(function()
    local m = bv.models.build("vit", {variant = "mu/4", num_classes = 3, image_size = 8})
    m:loss_and_grads(m:init(0), {image = x, labels = y}, {autocast = "fp8"})
  end, "autocast: unknown dtype 'fp8'")
  -- float16 without loss scaling loses small gradients to underflow: refused, naming bfloat16.
  T.raises(function()
    local m = bv.models.build("vit", {variant = "mu/4", num_classes = 3, image_size = 8})
    m:loss_and_grads(m:init(0), {image = x, labels = y}, {autocast = "float16"})
  end, 'autocast: "float16" needs loss scaling, which bvlua does not do; use autocast = "bfloat16"')
end)

T.test("mixup draws from the given stream", function()
  local m, p = model()
  local x = bv.randn({4, 8, 8, 3}, bv.rng(3))
  local y = bv.tensor({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 0, 0}}, "float32")
  local a = m:loss_and_grads(p, {image = x, labels = y}, {mixup_p = 0.2, rng = bv.rng(5)})
  local b = m:loss_and_grads(p, {image = x, labels = y}, {mixup_p = 0.2, rng = bv.rng(5)})
  local plain = m:loss_and_grads(p, {image = x, labels = y})
  a, b, plain = a:item(), b:item(), plain:item()
  T.eq(a, b)
  T.truthy(a ~= plain, "mixup changes the loss")
end)

T.run()
