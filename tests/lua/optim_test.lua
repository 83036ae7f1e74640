-- bv.optim from Lua: big_vision's optimizer on a small ViT's parameters; durations and itstime
-- (bv.chrono), which the schedules share.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local model = bv.models.build("vit", {variant = "mu/4", num_classes = 2, image_size = 8})
local shapes = model:param_shapes()
local ctx = {total_steps = 10, batch_size = 4, data_size = 100}

local function random_grads(rng)
  local grads = {}
  for _, s in ipairs(shapes) do grads[s.name] = bv.randn(s.shape, rng) end
  return grads
end

local function copy(params)
  local out = {}
  for name, t in pairs(params) do out[name] = t:clone() end
  return out
end

-- Adafactor; the patch embedding frozen by regex; kernels warm up over 2 steps (cosine), the
-- rest follows a linear schedule at half strength.
local config = {
  lr = 0.01,
  wd = 1e-4,
  grad_clip_norm = 1.0,
  optax_name = "big_vision.scale_by_adafactor",
  schedule = {
    {"embedding/.*", bv.null},
    {".*/kernel", {decay_type = "cosine", warmup_steps = 2}},
    {".*", {decay_type = "linear", mult = 0.5}},
  },
}

T.test("optimizer on a ViT: frozen by regex, warmup, schedules, state", function()
  local opt = bv.optim.new(json.encode(config), shapes, ctx)
  T.eq(opt:count(), 0)
  T.eq(opt:num_schedules(), 2)
  T.truthy(opt:frozen("embedding/kernel"), "embedding/kernel frozen")
  T.truthy(opt:frozen("embedding/bias"), "embedding/bias frozen")
  T.truthy(not opt:frozen("head/kernel"), "head/kernel trainable")
  T.near(opt:schedule(1, 0), 0)      -- warmup from zero
  T.near(opt:schedule(1, 1), 0.5)    -- half way through the warmup, before any decay
  T.near(opt:schedule(1, 4), 0.5 * (1 + math.cos(math.pi * 2 / 8)), 1e-6)
  T.near(opt:schedule(2, 0), 0.5)
  T.near(opt:schedule(2, 5), 0.25, 1e-7)

  local state = opt:state()
  T.eq(state.count:item(), 0)
  -- Dense_0/kernel is 32x128: factored, v_row drops the largest axis, v_col the other.
  local dense = "Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel"
  T.eq(state[dense .. "/v_row"]:shape(), {32})
  T.eq(state[dense .. "/v_col"]:shape(), {128})
  T.eq(state[dense .. "/ema"]:dtype(), "bfloat16")
  -- head/kernel is 32x2: its second dim is below 32, so it keeps a full v.
  T.eq(state["head/kernel/v"]:shape(), {32, 2})
  for name in pairs(state) do
    T.truthy(not name:find("^embedding/"), "frozen parameter with state: " .. name)
  end

  local params = model:init(0)
  local start = copy(params)
  local rng = bv.rng(1)
  local m = opt:update(params, random_grads(rng))
  T.eq(opt:count(), 1)
  T.near(m.global_schedule[1], 0)
  T.near(m.global_schedule[2], 0.5)
  T.truthy(m.l2_grads > 0 and m.l2_updates > 0 and m.l2_params > 0, "positive norms")
  -- First update: kernels are in warmup (multiplier 0, weight decay included): unchanged.
  T.truthy(params["head/kernel"] == start["head/kernel"], "head/kernel unchanged at step 1")
  T.truthy(params["Transformer/encoder_norm/scale"] ~= start["Transformer/encoder_norm/scale"],
           "encoder_norm/scale moved")
  local m2 = opt:update(params, random_grads(rng))
  T.near(m2.global_schedule[1], opt:schedule(1, 1), 1e-7)
  T.truthy(params["head/kernel"] ~= start["head/kernel"], "head/kernel moved at step 2")
  -- Frozen parameters never move.
  T.truthy(params["embedding/kernel"] == start["embedding/kernel"], "embedding/kernel frozen")
  T.truthy(params["embedding/bias"] == start["embedding/bias"], "embedding/bias frozen")
  -- l2_params is the norm of all parameters after the update.
  local sq = 0
  for _, t in pairs(params) do sq = sq + (t * t):sum():item() end
  T.near(m2.l2_params, math.sqrt(sq), 1e-3 * math.sqrt(sq))
end)

T.test("update without the norms: same parameters, no l2_grads/l2_updates/l2_params", function()
  local a = bv.optim.new(json.encode(config), shapes, ctx)
  local b = bv.optim.new(json.encode(config), shapes, ctx)
  local pa, pb = model:init(0), model:init(0)
  local rng = bv.rng(3)
  for _ = 1, 3 do
    local g = random_grads(rng)
    local ma = a:update(pa, g)
    local mb = b:update(pb, g, {norms = false})
    T.eq(mb.l2_grads, nil)
    T.eq(mb.l2_updates, nil)
    T.eq(mb.l2_params, nil)
    T.truthy(ma.l2_updates > 0, "l2_updates by default")
  end
  for name, t in pairs(pa) do T.truthy(pb[name] == t, name .. " differs") end
  T.raises(function() a:update(pa, random_grads(rng), 5) end, "table expected")
end)

T.device_test("the state is made on ctx.device; another rank's parts are shapes only",
              function(device)
  local on_device = {}
  for k, v in pairs(ctx) do on_device[k] = v end
  on_device.device = device
  local opt = bv.optim.new(json.encode(config), shapes, on_device)
  local n = 0
  for name, t in pairs(opt:state()) do
    if name ~= "count" then
      T.eq(t:device(), device, name)
      n = n + 1
    end
  end
  T.truthy(n > 0, "some state")
  on_device.owned = {}  -- owns nothing: no memory anywhere, before or after
  local before = bv.memory(device).bytes_in_use
  local none = bv.optim.new(json.encode(config), shapes, on_device)
  T.eq(bv.memory(device).bytes_in_use, before)
  for name in pairs(none:state()) do T.eq(name, "count") end
  on_device.device = "gpu"
  T.raises(function() bv.optim.new(json.encode(config), shapes, on_device) end,
           "ctx.device: 'gpu' is not a device")
end)

-- Two optimizers over the same parameters and gradients on `device`, one of them with lr
-- multiplier 1 set, then 0.5 from the second update on.
local function lr_multiplier_case(device)
  local c = {lr = 0.01, wd = 1e-2, optax_name = "scale_by_adam", schedule = {decay_type = "linear"}}
  local on = {device = device}
  for k, v in pairs(ctx) do on[k] = v end
  local plain = bv.optim.new(json.encode(c), shapes, on)
  local opt = bv.optim.new(json.encode(c), shapes, on)
  T.eq(opt:lr_multiplier(), 1)
  T.eq(opt:set_lr_multiplier(1), opt)
  local pa, pb = {}, {}
  for name, t in pairs(model:init(0)) do
    pa[name], pb[name] = t:to(device), t:clone():to(device)  -- to("cpu") copies nothing
  end
  local rng = bv.rng(5)
  local function grads()
    local g = random_grads(rng)
    for name, t in pairs(g) do g[name] = t:to(device) end
    return g
  end
  local g = grads()
  local ma, mb = plain:update(pa, g), opt:update(pb, g)
  for name, t in pairs(pa) do T.truthy(pb[name]:equal(t), name .. " differs at multiplier 1") end
  T.eq(mb, ma)

  opt:set_lr_multiplier(0.5)
  T.eq(opt:lr_multiplier(), 0.5)
  local before = copy(pa)
  g = grads()
  ma, mb = plain:update(pa, g), opt:update(pb, g)
  T.eq(mb.global_schedule[1], 0.5 * ma.global_schedule[1])
  T.eq(opt:schedule(1, 1), plain:schedule(1, 1))  -- the schedule itself is unmultiplied
  T.eq(mb.l2_updates, 0.5 * ma.l2_updates)        -- the applied updates, halved exactly
  for name, t in pairs(before) do
    local half = ((pb[name] - t) - (pa[name] - t) * 0.5):abs():max():item()
    T.truthy(half < 1e-6, string.format("%s: Δθ is not half (%g off)", name, half))
  end
end

T.test("set_lr_multiplier: 1 changes no bit, 0.5 halves the update and global_schedule",
       function()
  lr_multiplier_case("cpu")
  local opt = bv.optim.new(json.encode(config), shapes, ctx)
  local msg = "optimizer: lr multiplier must be finite and >= 0, got "
  T.raises(function() opt:set_lr_multiplier(-1) end, msg .. "-1")
  T.raises(function() opt:set_lr_multiplier(math.huge) end, msg .. "inf")
  T.raises(function() opt:set_lr_multiplier(0 / 0) end, "nan")
  T.raises(function() opt:set_lr_multiplier("half") end, "number expected")
  T.eq(opt:lr_multiplier(), 1)
  opt:set_lr_multiplier(0)
  T.eq(opt:lr_multiplier(), 0)
end)

T.device_test("set_lr_multiplier on the device", lr_multiplier_case)

T.test("state() and load_state() resume identically", function()
  local a = bv.optim.new(json.encode(config), shapes, ctx)
  local params = model:init(0)
  local rng = bv.rng(2)
  for _ = 1, 3 do a:update(params, random_grads(rng)) end
  local saved, saved_params = a:state(), copy(params)
  local later = {random_grads(rng), random_grads(rng)}
  for _, g in ipairs(later) do a:update(params, g) end

  local b = bv.optim.new(json.encode(config), shapes, ctx)
  b:load_state(saved)
  T.eq(b:count(), 3)
  for _, g in ipairs(later) do b:update(saved_params, g) end
  for name, t in pairs(params) do T.truthy(saved_params[name] == t, name .. " differs") end

  saved["head/kernel/v"] = bv.zeros({2, 32})
  T.raises(function() b:load_state(saved) end, "head/kernel/v")
end)

T.test("fsdp: a layer stack updated in row blocks equals the whole update", function()
  local cfg = {optax_name = "big_vision.scale_by_adafactor", lr = 0.1, wd = 1e-3, schedule = {}}
  local whole_shapes = {{name = "stack", shape = {4, 64, 48}}}
  local whole = bv.optim.new(json.encode(cfg), whole_shapes, {total_steps = 3})
  T.truthy(whole:rows_independent("stack"), "factored over dims 2 and 3: rows apart")
  local blocks = {bv.optim.new(json.encode(cfg), {{name = "stack", shape = {1, 64, 48}}}, {total_steps = 3}),
                  bv.optim.new(json.encode(cfg), {{name = "stack", shape = {3, 64, 48}}}, {total_steps = 3})}
  local rng = bv.rng(1)
  local p = bv.randn({4, 64, 48}, rng)
  local parts = {p:narrow(1, 1, 1):clone(), p:narrow(1, 2, 3):clone()}
  for _ = 1, 3 do
    local g = bv.randn({4, 64, 48}, rng)
    whole:update({stack = p}, {stack = g})
    blocks[1]:update({stack = parts[1]}, {stack = g:narrow(1, 1, 1)})
    blocks[2]:update({stack = parts[2]}, {stack = g:narrow(1, 2, 3)})
  end
  T.truthy(bv.cat({parts[1], parts[2]}, 1):allclose(p, 1e-6, 1e-7), "row blocks = whole")
  -- What mixes rows keeps a tensor whole: factoring over dim 1, or per-tensor clipping.
  local wide = bv.optim.new(json.encode(cfg), {{name = "w", shape = {64, 48}}}, {total_steps = 3})
  T.truthy(not wide:rows_independent("w"), "factored over dim 1")
  cfg.optax = {clipping_threshold = 1.0}
  local clipped = bv.optim.new(json.encode(cfg), whole_shapes, {total_steps = 3})
  T.truthy(not clipped:rows_independent("stack"), "clipping is per tensor")
  local adam = bv.optim.new(json.encode({optax_name = "scale_by_adam", lr = 0.1, schedule = {}}),
                            {{name = "w", shape = {64, 48}}}, {total_steps = 3})
  T.truthy(adam:rows_independent("w"), "adam is element-wise")
end)

T.test("fsdp: with a group, replicated parameters count in the norms on rank 0", function()
  local cfg = {optax_name = "big_vision.sgd", lr = 0.1, schedule = {}}
  local group = bv.dist.init{backend = "gloo", timeout = 10}  -- one process: sums are identities
  local two = {{name = "a", shape = {2}}, {name = "b", shape = {2}}}
  local opt = bv.optim.new(json.encode(cfg), two, {total_steps = 1, group = group, replicated = {"a"}})
  local m = opt:update({a = bv.tensor({3.0, 0.0}), b = bv.tensor({0.0, 0.0})},
                       {a = bv.tensor({3.0, 0.0}), b = bv.tensor({0.0, 4.0})})
  T.near(m.l2_grads, 5, 1e-6)
  T.raises(function()
    bv.optim.new(json.encode(cfg), two, {total_steps = 1, group = group, replicated = {"c"}})
  end, "replicated parameter 'c' does not exist")
end)

T.test("errors name the culprit and the script line", function()
  local function new(cfg) return bv.optim.new(json.encode(cfg), shapes, ctx) end
  local msg = T.raises(function() new({lr = 0.1, optax_name = "big_vision.lion"}) end,
                      "big_vision.lion")
  T.truthy(msg:find("optim_test.lua:%d+"), "no file:line in " .. msg)
  T.raises(function()
    new({lr = 0.1, optax_name = "scale_by_adam", optax = {b3 = 0.9}})
  end, "'b3'")
  T.raises(function()
    new({lr = 0.1, optax_name = "big_vision.sgd", schedule = {decay_type = "cosine", warmup = 2}})
  end, "'warmup'")
  T.raises(function()
    new({lr = 0.1, optax_name = "big_vision.sgd", schedule = {{"head/.*", {}}}})
  end, "All params must be covered")
  local opt = new({lr = 0.1, optax_name = "big_vision.sgd"})
  local params = model:init(0)
  local grads = random_grads(bv.rng(3))
  grads["head/bias"] = nil
  T.raises(function() opt:update(params, grads) end, "no gradient for 'head/bias'")
  T.raises(function() opt:schedule(2, 0) end, "out of range")
  T.raises(function() opt:frozen("nope") end, "nope")
end)

T.test("bv.chrono.steps and bv.chrono.itstime (big_vision's utils.steps, utils.itstime)", function()
  local steps = require("bv.chrono").steps
  T.eq(steps("warmup", {warmup_epochs = 2}, 1000, 100, 50), 20)
  T.eq(steps("warmup", {warmup_percent = 0.25}, nil, nil, 10), 2)  -- 2.5 -> 2
  T.eq(steps("warmup", {warmup_examples = 350}, nil, 100), 4)      -- 3.5 -> 4
  T.eq(steps("total", {total_steps = 7}, 1000, 100), 7)
  T.eq(steps("ckpt", {}, 1000, 100, 50, 0), 0)
  T.raises(function() steps("ckpt", {}, 1000, 100, 50) end, "'ckpt'")
  T.raises(function() steps("w", {w_steps = 1, w_epochs = 1}, 10, 1) end, "w_epochs")

  local itstime = require("bv.chrono").itstime
  T.eq(itstime(1, 10, 100), true)
  T.eq(itstime(1, 10, 100, {first = false}), false)
  T.eq(itstime(20, 10, 100), true)
  T.eq(itstime(25, 10, 100), false)
  T.eq(itstime(100, 10, 101), false)  -- within 0.25 * 10 of the end
  T.eq(itstime(101, 10, 101), true)
  T.eq(itstime(101, 10, 101, {last = false}), false)
  T.eq(itstime(100, 10, 101, {drop_close_to_last = 0}), true)
  T.eq(itstime(5, nil, 100), false)
end)

T.run()
