-- A rank of tests/cli/replicate_wire_test.sh (`bvlua launch --nproc 2 -- run` this file [fake]):
-- config.sharding_wire_dtype = "bfloat16" for the gradients that replicate and zero1 all-reduce,
-- with sharding_overlap on (bv.dist.grad_buckets, during the backward) and off (one all-reduce
-- after it). A small ViT trains STEPS SGD steps (learning rate LR) in float32 (the default) and
-- in bfloat16. Per step, S:gradients sends (g:sent_bytes()) 4 N + 4 bytes in float32 and
-- 2 N + 4 in bfloat16 (N: the model's float32 values; 4: the loss, which stays float32). The
-- first gradients are exactly what the wire makes of the two ranks' float32 gradients: each
-- rounded to bfloat16, summed in float32 and rounded to bfloat16 (Gloo's sum of 2 ranks), halved
-- in float32; the default's are the float32 mean, bit for bit, and its first loss one process's.
-- The losses stay within LOSS_TOL of the float32 run's (the largest difference is printed).
-- "fake": on the test device (rank r on fake:r). Prints "rank R: ok" or fails.
local sharding = require "bv.sharding"
local rank = require "tests.lua.dist.rank"
local device, g = rank.start(arg[1])
local r, world = g:rank(), g:world_size()
assert(world == 2, "run with --nproc 2")
local STEPS, LR, LOSS_TOL = 10, 0.1, 5e-4

local function bf16(t) return t:to("bfloat16"):to("float32") end
local maxdiff = rank.maxdiff
local sorted_names = rank.sorted_names

local ok, err = pcall(bv.dist.grad_buckets, g, {"w"}, {wire_dtype = "float16"})
assert(not ok and tostring(err):find('wire_dtype must be "float32" or "bfloat16"', 1, true),
       tostring(err))

local m = bv.models.build("vit", {width = 32, depth = 2, mlp_dim = 64, num_heads = 2,
                                  patch_size = 4, image_size = 16, num_classes = 3,
                                  head_zeroinit = false})
local half = rank.halves(m, device)
local function step(p) return half(p, r * 2 + 1) end
local init = function() return rank.init_on(m, device) end

-- Both ranks' first losses and gradients, computed here: what the sharded first step reduces.
local l0, g0 = half(init(), 1)
local l1, g1 = half(init(), 3)
local one_process_loss = ((l0 + l1) / 2):item()
local n = 0
for _, t in pairs(g0) do
  assert(t:dtype() == "float32", "the model has a " .. t:dtype() .. " gradient")
  n = n + t:numel()
end

local function train(strategy, overlap, wire)
  local config = {sharding_strategy = strategy, sharding_overlap = overlap}
  if wire ~= "default" then config.sharding_wire_dtype = wire end
  local S = sharding.new(config, g, device)
  S:plan(m:param_shapes())
  local params = S:hold(init())
  local run = {losses = {}, bytes = {}}
  for k = 1, STEPS do
    local before = g:sent_bytes()
    local loss, grads = S:gradients(params, step)
    run.bytes[k] = g:sent_bytes() - before
    run.losses[k] = loss:item()
    run.grads = run.grads or grads
    local owned = S:owned(params)
    for name, gr in pairs(grads) do owned[name]:copy_(owned[name] - gr * LR) end
    S:sync_params(params)
  end
  assert((S.overlapped_steps or 0) == (overlap and STEPS or 0),
         string.format("%s, overlap %s: %s steps overlapped", strategy, overlap,
                       S.overlapped_steps))
  return run
end

local worst_loss, worst_grad = 0, 0
for _, strategy in ipairs({"replicate", 'zero1(axis="data", min_size_to_shard_mb=0)'}) do
  for _, overlap in ipairs({true, false}) do
    local f = train(strategy, overlap, "default")
    local b = train(strategy, overlap, "bfloat16")
    local where = string.format("rank %d, %s, overlap %s", r, strategy:match("^%w+"), overlap)
    assert(f.losses[1] == one_process_loss,
           string.format("%s: the default's first loss %.9g, one process's %.9g", where,
                         f.losses[1], one_process_loss))
    for k = 1, STEPS do
      -- Overlap's first step: rank 0 also broadcasts the buckets' layout (the same either way).
      local extra = f.bytes[k] - (4 * n + 4)
      assert(extra == b.bytes[k] - (2 * n + 4) and (extra == 0 or (overlap and k == 1 and r == 0)),
             string.format("%s, step %d: sent %d bytes in float32, %d in bfloat16, wanted %d and "
                           .. "%d", where, k, f.bytes[k], b.bytes[k], 4 * n + 4, 2 * n + 4))
      local diff = math.abs(b.losses[k] - f.losses[k])
      worst_loss = math.max(worst_loss, diff)
      assert(diff <= LOSS_TOL, string.format("%s, step %d: loss %.6f in bfloat16, %.6f in "
                                             .. "float32 (tolerance %g)", where, k, b.losses[k],
                                             f.losses[k], LOSS_TOL))
    end
    local compared, rounded = 0, false
    for _, name in ipairs(sorted_names(f.grads)) do
      local got, want = b.grads[name] or error(where .. ": no bfloat16 gradient for " .. name),
                        f.grads[name]
      assert(got:dtype() == "float32", name .. ": the bfloat16 run's gradient is " .. got:dtype())
      local a, c = g0[name]:to(device), g1[name]:to(device)
      assert(want:equal((a + c) / 2), string.format("%s: the default's gradient of %s is not the "
                                                     .. "float32 mean (off by %g)", where, name,
                                                     maxdiff(want, (a + c) / 2)))
      local exact = bf16(bf16(a) + bf16(c)) / 2
      assert(got:equal(exact), string.format("%s: the bfloat16 gradient of %s is off the wire's "
                                             .. "value by %g", where, name, maxdiff(got, exact)))
      local rel = maxdiff(got, want) / math.max(want:abs():max():item(), 1e-30)
      worst_grad = math.max(worst_grad, rel)
      assert(rel < 2 ^ -7, string.format("%s: the bfloat16 gradient of %s differs from float32 "
                                         .. "by %g of its largest value", where, name, rel))
      compared, rounded = compared + 1, rounded or not got:equal(want)
    end
    assert(compared > 0 and rounded, where .. ": no gradient compared, or bfloat16 changed none")
    if overlap and strategy == "replicate" then
      print(string.format("rank %d: a step sends %d bytes in float32, %d in bfloat16 (%d values)",
                          r, f.bytes[STEPS], b.bytes[STEPS], n))
    end
  end
end
print(string.format("rank %d: over %d steps the bfloat16 losses stay within %.2e of float32's "
                    .. "(tolerance %g); first gradients within %.2e of the largest value", r,
                    STEPS, worst_loss, LOSS_TOL, worst_grad))
print(string.format("rank %d: ok", r))
