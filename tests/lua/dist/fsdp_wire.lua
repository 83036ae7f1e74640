-- A rank of tests/cli/fsdp_wire_test.sh (`bvlua launch --nproc 2 -- run` this file [fake]):
-- config.sharding_wire_dtype = "bfloat16" under fsdp. Reads: every rank, the owner included, gets
-- the owner's float32 value rounded to bfloat16 (float32 and the default: the exact value), and a
-- float64 parameter travels as it is. Training: a scanned ViT, all of it fsdp (split by layer),
-- trains STEPS SGD steps (learning rate LR) with the wire in float32 (the default) and in bfloat16: the bytes
-- broadcast and reduced a step halve, as do the bytes the group sends (g:sent_bytes(), but for
-- the loss's 4: Gloo moves bfloat16 as bfloat16), as many collectives run, the owner's gradient is the mean
-- of a bfloat16 sum (twice it is a bfloat16 number), and the losses stay within LOSS_TOL of the
-- float32 run's (the largest difference is printed). The default's first loss equals one
-- process's on the same examples, bit for bit. "fake": on the test device (rank r on fake:r).
-- Prints "rank R: ok" or fails.
local sharding = require "bv.sharding"
local rank = require "tests.lua.dist.rank"
local device, g = rank.start(arg[1])
local r, world = g:rank(), g:world_size()
assert(world == 2, "run with --nproc 2")
local STEPS, LR, LOSS_TOL = 10, 0.1, 0.005

local function bf16(t) return t:to("bfloat16"):to("float32") end
local maxdiff = rank.maxdiff
local sorted_names = rank.sorted_names

-- Options.
local ok, err = pcall(bv.dist.fsdp, g, {}, {wire_dtype = "float16"})
assert(not ok and tostring(err):find('wire_dtype must be "float32" or "bfloat16", got float16', 1,
                                     true), tostring(err))
ok, err = pcall(bv.dist.fsdp, g, {}, {wire = "bfloat16"})
assert(not ok and tostring(err):find("fsdp: unknown option 'wire'", 1, true), tostring(err))

-- Reads. The same values on every rank: w whole (owner 1), s split by rows (owners 0, 1, 0), d a
-- float64 one (owner 0).
local w = (bv.randn({5, 7}, bv.rng(3)) * 3):to(device)
local s = bv.randn({3, 4, 6}, bv.rng(4)):to(device)
local d = bv.randn({9}, bv.rng(5)):to("float64"):to(device)
local read_bytes = {}
for _, wire in ipairs({"default", "float32", "bfloat16"}) do
  local fs = bv.dist.fsdp(g, {{name = "w", value = w, owners = {1}},
                              {name = "s", value = s, owners = {0, 1, 0}},
                              {name = "d", value = d, owners = {0}}},
                          wire ~= "default" and {wire_dtype = wire} or nil)
  local got = fs:run(function()
    return {w = fs:read("w"), s2 = fs:read("s", 2), s3 = fs:read("s", 3), d = fs:read("d")}
  end)
  local round = wire == "bfloat16" and bf16 or function(t) return t end
  local where = string.format("rank %d, wire %s", r, wire)
  for name, want in pairs({w = round(w), s2 = round(s:select(1, 2)), s3 = round(s:select(1, 3)),
                           d = d}) do
    assert(got[name]:dtype() == want:dtype(), string.format("%s: %s is %s, wanted %s", where, name,
                                                            got[name]:dtype(), want:dtype()))
    assert(got[name]:equal(want), string.format("%s: %s differs from the owner's value by %g",
                                                where, name, maxdiff(got[name], want)))
  end
  assert(wire ~= "bfloat16" or not bf16(w):equal(w), "bfloat16 rounding changed nothing")
  assert(fs:broadcasts() == 4, string.format("%s: %d broadcasts", where, fs:broadcasts()))
  read_bytes[wire] = fs:broadcast_bytes()
end
local f32 = (5 * 7 + 2 * 4 * 6) * 4 + 9 * 8
assert(read_bytes.default == f32 and read_bytes.float32 == f32,
       string.format("%d and %d bytes broadcast in float32, wanted %d", read_bytes.default,
                     read_bytes.float32, f32))
assert(read_bytes.bfloat16 == (5 * 7 + 2 * 4 * 6) * 2 + 9 * 8,
       string.format("%d bytes broadcast in bfloat16, wanted the float32 ones halved, the "
                     .. "float64 one whole", read_bytes.bfloat16))

-- Training.
local m = bv.models.build("vit", {width = 32, depth = 3, mlp_dim = 64, num_heads = 2,
                                  patch_size = 4, image_size = 16, scan = true, num_classes = 3,
                                  head_zeroinit = false})
local half = rank.halves(m, device)
local function step(p) return half(p, r * 2 + 1) end
local function init() return rank.init_on(m, device) end
-- What the sharded step's loss is: the mean over ranks of each one's loss (a float32 sum).
local one_process_loss = ((half(init(), 1) + half(init(), 3)) / 2):item()

local runs = {}
for _, wire in ipairs({"default", "bfloat16"}) do
  local config = {sharding_strategy = 'fsdp(axis="data", min_size_to_shard_mb=0)'}
  if wire ~= "default" then config.sharding_wire_dtype = wire end
  local S = sharding.new(config, g, device)
  S:plan(m:param_shapes(), nil, function() return true end)
  local held = S:hold(init())
  local fs = S.fsdp
  local run = {losses = {}, per_step = {}}
  for k = 1, STEPS do
    local b0, r0, bb0, rb0 = fs:broadcasts(), fs:reduces(), fs:broadcast_bytes(), fs:reduce_bytes()
    local sent0 = g:sent_bytes()
    local loss, grads = S:gradients(held, step)
    run.per_step[k] = {broadcasts = fs:broadcasts() - b0, reduces = fs:reduces() - r0,
                       broadcast_bytes = fs:broadcast_bytes() - bb0,
                       reduce_bytes = fs:reduce_bytes() - rb0, sent = g:sent_bytes() - sent0}
    run.losses[k] = loss:item()
    run.grads = run.grads or grads
    local owned = S:owned(held)
    for name, gr in pairs(grads) do owned[name]:copy_(owned[name] - gr * LR) end
  end
  runs[wire] = run
end
local f, b = runs.default, runs.bfloat16
assert(f.losses[1] == one_process_loss,
       string.format("rank %d: the default's first loss %.9g, one process's %.9g", r, f.losses[1],
                     one_process_loss))
local worst = 0
for k = 1, STEPS do
  local a, c = f.per_step[k], b.per_step[k]
  local where = string.format("rank %d, step %d", r, k)
  assert(a.broadcasts == c.broadcasts and a.reduces == c.reduces,
         string.format("%s: %d broadcasts and %d reduces in float32, %d and %d in bfloat16", where,
                       a.broadcasts, a.reduces, c.broadcasts, c.reduces))
  assert(a.broadcast_bytes > 0 and c.broadcast_bytes * 2 == a.broadcast_bytes,
         string.format("%s: %d bytes broadcast in bfloat16, %d in float32", where,
                       c.broadcast_bytes, a.broadcast_bytes))
  assert(a.reduce_bytes > 0 and c.reduce_bytes * 2 == a.reduce_bytes,
         string.format("%s: %d bytes reduced in bfloat16, %d in float32", where, c.reduce_bytes,
                       a.reduce_bytes))
  assert(a.sent > 4 and c.sent - 4 == (a.sent - 4) / 2,
         string.format("%s: the group sent %d bytes in bfloat16, %d in float32 (the loss's 4 in "
                       .. "each)", where, c.sent, a.sent))
  local diff = math.abs(b.losses[k] - f.losses[k])
  worst = math.max(worst, diff)
  assert(diff <= LOSS_TOL, string.format("%s: loss %.6f in bfloat16, %.6f in float32 (tolerance "
                                         .. "%g)", where, b.losses[k], f.losses[k], LOSS_TOL))
end
-- The owner's first gradient: the bfloat16 sum over the 2 ranks, halved in float32 (twice it is
-- a bfloat16 number), close to the float32 run's; the float32 run's is not such a number.
local rounded_f32 = true
local grad_diff, grad_scale = 0, 0
for _, name in ipairs(sorted_names(f.grads)) do
  local got, want = b.grads[name] or error("no bfloat16 gradient for " .. name), f.grads[name]
  assert(got:dtype() == "float32", name .. ": the owner's gradient is " .. got:dtype())
  local twice = got * 2
  assert(bf16(twice):equal(twice), string.format("rank %d: twice the gradient of %s is not a "
                                                 .. "bfloat16 number", r, name))
  rounded_f32 = rounded_f32 and bf16(want * 2):equal(want * 2)
  grad_diff = math.max(grad_diff, maxdiff(got, want))
  grad_scale = math.max(grad_scale, want:abs():max():item())
end
local grad_rel = grad_diff / grad_scale
assert(not rounded_f32, "the float32 run's gradients are bfloat16 numbers too")
assert(grad_rel < 0.02, string.format("rank %d: the bfloat16 gradients differ from float32 by %g "
                                      .. "of the largest value", r, grad_rel))
local last = f.per_step[STEPS]
print(string.format("rank %d: a step sends %d bytes in float32, %d in bfloat16 (g:sent_bytes())",
                    r, last.sent, b.per_step[STEPS].sent))
print(string.format("rank %d: a step broadcasts %d bytes and reduces %d in float32, %d and %d in "
                    .. "bfloat16; losses %.4f -> %.4f in float32, largest difference in bfloat16 "
                    .. "%.2e over %d steps (tolerance %g); first gradients within %.2e of the "
                    .. "largest value", r, last.broadcast_bytes, last.reduce_bytes,
                    b.per_step[STEPS].broadcast_bytes, b.per_step[STEPS].reduce_bytes,
                    f.losses[1], f.losses[STEPS], worst, STEPS, LOSS_TOL, grad_rel))
print(string.format("rank %d: ok", r))
