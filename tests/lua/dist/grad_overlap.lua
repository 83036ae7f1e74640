-- A rank of tests/cli/grad_overlap_test.sh (`bvlua launch --nproc 2 -- run` this file [fake]):
-- replicate's all-reduce during the backward (config.sharding_overlap, bv.dist.grad_buckets).
-- For accum_steps 1 and 2, and with replicate mixed with fsdp and with zero1: the first step
-- learns the bucket layout (nothing starts during its backward), later steps start buckets from
-- the gradient hooks before the backward ends; gradients, loss and the parameters after a few
-- SGD steps equal the path without overlap to float32 rounding, and one process's full-batch
-- gradients. "fake": on the test device (rank r on fake:r). Prints "rank R: ok" or fails.
local sharding = require "bv.sharding"
local rank = require "tests.lua.dist.rank"
local device, g = rank.start(arg[1])
local r = g:rank()
local m = bv.models.build("vit", {width = 32, depth = 3, mlp_dim = 64, num_heads = 2,
                                  patch_size = 4, image_size = 16, num_classes = 3,
                                  head_zeroinit = false})
local x = bv.randn({8, 16, 16, 3}, bv.rng(1)):to(device)
local onehot = {}
for i = 1, 8 do
  onehot[i] = {0.0, 0.0, 0.0}
  onehot[i][(i % 3) + 1] = 1.0
end
local labels = bv.tensor(onehot):to(device)
local function init() return rank.init_on(m, device) end
local sorted_names = rank.sorted_names
local maxdiff = rank.maxdiff

local REPLICATE_FSDP = {{"head/.*", "replicate"}, {"Transformer/encoderblock_0/.*", "replicate"},
                        {".*", 'fsdp(axis="data", min_size_to_shard_mb=0)'}}
local ZERO1 = 'zero1(axis="data", min_size_to_shard_mb=0)'

for _, case in ipairs({{accum = 1, strategy = "replicate"}, {accum = 2, strategy = "replicate"},
                       {accum = 2, strategy = REPLICATE_FSDP}, {accum = 1, strategy = ZERO1}}) do
  local what = string.format("accum_steps %d, %s", case.accum,
                             type(case.strategy) == "table" and "replicate + fsdp" or case.strategy)
  local function step(p, lo, n)
    return m:loss_and_grads(p, {image = x:narrow(1, lo, n), labels = labels:narrow(1, lo, n)},
                            {loss = "softmax_xent", accum_steps = case.accum})
  end
  local lo = r * 4 + 1
  -- Both paths, side by side, for 3 SGD steps from the same start.
  local runs = {}
  for _, overlap in ipairs({true, false}) do
    local S = sharding.new({sharding_strategy = case.strategy, sharding_overlap = overlap}, g,
                           device)
    S.bucket_mb = 0.01  -- ~10 KB: a handful of buckets even for this model
    S:plan(m:param_shapes())
    local held = S:hold(init())
    local losses, first_grads = {}, nil
    for k = 1, 3 do
      local loss, grads = S:gradients(held, function(p) return step(p, lo, 4) end)
      losses[k] = loss:item()
      first_grads = first_grads or grads
      local owned = S:owned(held)
      for name, gr in pairs(grads) do
        -- In place for the fsdp parts and replicated weights, a new tensor for biases: the
        -- buckets' hooks must follow a parameter that was replaced.
        if S.kind[name] == "fsdp" or not name:find("bias") then
          owned[name]:copy_(owned[name] - gr * 0.5)
        else
          held[name] = held[name] - gr * 0.5
        end
      end
      S:sync_params(held)
      if overlap then
        local st = S:grad_buckets(held):stats()
        assert(st.steps == k, string.format("%s: %d overlapped steps after %d", what, st.steps, k))
        assert(st.layout_buckets > 1, what .. ": " .. st.layout_buckets .. " bucket(s)")
        if k == 1 then
          assert(st.started_in_backward == 0, what .. ": the layout step started buckets early")
        else
          -- All but the buckets whose last member arrives at the very end start from a hook.
          assert(st.started_in_backward >= (k - 1) * (st.layout_buckets - 1),
                 string.format("%s: only %d of %d buckets started during the backward", what,
                               st.started_in_backward, st.buckets))
        end
      end
    end
    if overlap and r == 0 then
      local st = S:grad_buckets(held):stats()
      print(string.format("%s: %d buckets a step, %d of %d started during the backward", what,
                          st.layout_buckets, st.started_in_backward, st.buckets))
    end
    runs[overlap] = {S = S, params = S:full_params(held), losses = losses, grads = first_grads}
  end
  local on, off = runs[true], runs[false]
  for k = 1, 3 do
    assert(math.abs(on.losses[k] - off.losses[k]) < 1e-6,
           string.format("%s: loss of step %d: %g with overlap, %g without", what, k,
                         on.losses[k], off.losses[k]))
  end
  for _, name in ipairs(sorted_names(off.grads)) do
    local got = on.grads[name] or error(what .. ": no gradient for " .. name .. " with overlap")
    local d = maxdiff(got, off.grads[name])
    assert(d < 1e-6, string.format("%s: first gradient of %s differs by %g", what, name, d))
  end
  for _, name in ipairs(sorted_names(off.params)) do
    local d = maxdiff(on.params[name], off.params[name])
    assert(d < 1e-5, string.format("%s: %s after 3 steps differs by %g", what, name, d))
  end
  -- One process's gradients of the whole batch (this rank alone, no group).
  local _, want = step(init(), 1, 8)
  for name, gr in pairs(on.grads) do
    if on.S.kind[name] ~= "fsdp" then
      local d = maxdiff(gr, want[name])
      assert(d < 1e-5, string.format("%s: %s differs from one process's by %g", what, name, d))
    end
  end
end
print(string.format("rank %d: ok", r))
