-- A rank of tests/cli/fsdp_reshard_test.sh (`bvlua launch --nproc 2 -- run` this file [fake]):
-- config.sharding_reshard_after_forward = false under fsdp with remat. A scanned ViT whose layers
-- are rematerialised, split by layer and as whole units, trains 3 SGD steps with the option on and
-- off. Off (false), every part is broadcast once a step instead of twice (a whole unit: once
-- instead of once per layer plus once), the gradient reduces are as many, the losses, gradients
-- and parameters are bit-identical, prefetches still serve reads, and the kept bytes peak at the
-- layer parts this rank does not own. "fake": on the test device (rank r on fake:r). Prints
-- "rank R: ok" or fails.
local sharding = require "bv.sharding"
local rank = require "tests.lua.dist.rank"
local device, g = rank.start(arg[1])
local r = g:rank()
local DEPTH = 3
local m = bv.models.build("vit", {width = 32, depth = DEPTH, mlp_dim = 64, num_heads = 2,
                                  patch_size = 4, image_size = 16, scan = true, num_classes = 3,
                                  head_zeroinit = false})
local x = bv.randn({4, 16, 16, 3}, bv.rng(1)):to(device)
local labels = bv.tensor({{1.0, 0, 0}, {0, 1.0, 0}, {0, 0, 1.0}, {1.0, 0, 0}}):to(device)
local function step(p, lo, hi, accum)
  return m:loss_and_grads(p, {image = x[{{lo, hi}}], labels = labels[{{lo, hi}}]},
                          {loss = "softmax_xent", accum_steps = accum})
end
local function init() return rank.init_on(m, device) end
local sorted_names = rank.sorted_names
local maxdiff = rank.maxdiff
local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local ok, err = pcall(bv.dist.fsdp, g, {}, {reshard = false})
assert(not ok and tostring(err):find("fsdp: unknown option 'reshard'", 1, true), tostring(err))
ok, err = pcall(bv.dist.fsdp, g, {}, {reshard_after_forward = 0})
assert(not ok and tostring(err):find("reshard_after_forward must be true or false", 1, true),
       tostring(err))

local STEPS = 3
local lo = r * 2 + 1
for _, case in ipairs({{split = true, accum = 1}, {split = false, accum = 1},
                       {split = true, accum = 2}}) do
  local split, accum = case.split, case.accum
  local what = (split and "split by layer" or "whole units") .. ", accum_steps " .. accum
  local runs = {}
  for _, reshard in ipairs({true, false}) do
    local S = sharding.new({sharding_strategy = 'fsdp(axis="data", min_size_to_shard_mb=0)',
                            sharding_reshard_after_forward = reshard}, g, device)
    S:plan(m:param_shapes(), nil, function() return split end)
    local held = S:hold(init())
    local fs = S.fsdp
    local per_step, losses, first_grads = {}, {}, nil
    for k = 1, STEPS do
      local b0, r0 = fs:broadcasts(), fs:reduces()
      local loss, grads = S:gradients(held, function(p)
        local l, gr = step(p, lo, lo + 1, accum)
        -- Before the end of the run: every kept value went to its recomputation.
        assert(fs:kept_bytes() == 0, string.format("%s: %d bytes still kept after the backward",
                                                   what, fs:kept_bytes()))
        return l, gr
      end)
      per_step[k] = {broadcasts = fs:broadcasts() - b0, reduces = fs:reduces() - r0}
      losses[k] = loss:item()
      first_grads = first_grads or grads
      local owned = S:owned(held)
      for name, gr in pairs(grads) do owned[name]:copy_(owned[name] - gr * 0.5) end
    end
    runs[reshard] = {S = S, per_step = per_step, losses = losses, grads = first_grads,
                     prefetched = fs:prefetched(), kept = fs:kept_peak_bytes(),
                     params = S:full_params(held)}
  end
  local on, off = runs[true], runs[false]  -- reshard after forward: today's; off: kept

  -- What to expect, from the plan: the scanned stacks read once by each layer (under remat,
  -- by its forward and again by its recomputation) and the rest read once, with gradients.
  local stacks, others, kept_bytes = 0, 0, 0
  for _, p in ipairs(m:param_shapes()) do
    if p.scan then
      stacks = stacks + 1
      local rows = on.S:rows(p.name, r)
      if rows then
        kept_bytes = kept_bytes + (DEPTH - #rows) * numel(p.shape) // DEPTH * 4
      elseif not on.S:updates(p.name, r) then
        kept_bytes = kept_bytes + numel(p.shape) * 4
      end
    else
      others = others + 1
    end
  end
  assert(stacks > 0 and others > 0, what .. ": the model has no scanned stack")
  -- A whole value read with gradients stays until the end of the step (every pass of
  -- accum_steps uses it); a layer of a split stack is read again by each pass.
  assert(split or accum == 1, "whole units are counted for accum_steps 1")
  local parts = split and others + accum * stacks * DEPTH or others + stacks
  local want_on = split and others + accum * 2 * stacks * DEPTH or others + (DEPTH + 1) * stacks
  -- Each backward pass reduces, and so does each recomputation's inner backward through a whole
  -- unit (a slice of its gradient).
  local reduces = accum * (others + stacks * DEPTH)
  for k = 1, STEPS do
    local a, b = on.per_step[k], off.per_step[k]
    local where = string.format("rank %d, %s, step %d", r, what, k)
    assert(a.broadcasts == want_on, string.format("%s: %d broadcasts resharding after forward, "
                                                  .. "wanted %d", where, a.broadcasts, want_on))
    assert(b.broadcasts == parts, string.format("%s: %d broadcasts keeping, wanted %d (one a "
                                                .. "part)", where, b.broadcasts, parts))
    assert(a.reduces == reduces and b.reduces == reduces,
           string.format("%s: %d and %d gradient reduces, wanted %d", where, a.reduces, b.reduces,
                         reduces))
    assert(on.losses[k] == off.losses[k], string.format("%s: loss %.9g kept, %.9g not", where,
                                                        off.losses[k], on.losses[k]))
  end
  for _, name in ipairs(sorted_names(on.grads)) do
    local got = off.grads[name] or error(what .. ": no gradient for " .. name .. " when kept")
    local d = maxdiff(got, on.grads[name])
    assert(d == 0, string.format("rank %d, %s: first gradient of %s differs by %g", r, what, name,
                                 d))
  end
  for _, name in ipairs(sorted_names(on.params)) do
    local d = maxdiff(off.params[name], on.params[name])
    assert(d == 0, string.format("rank %d, %s: %s after %d steps differs by %g", r, what, name,
                                 STEPS, d))
  end
  assert(off.prefetched > 0, what .. ": no read was prefetched when kept")
  assert(on.kept == 0, string.format("%s: %d bytes kept resharding after forward", what, on.kept))
  assert(off.kept == kept_bytes, string.format("rank %d, %s: kept at most %d bytes, wanted %d", r,
                                               what, off.kept, kept_bytes))
  print(string.format("rank %d, %s: %d broadcasts a step resharding after forward, %d keeping; "
                      .. "%d reduces a step; %d bytes kept at most (parameters: %.0f bytes)", r,
                      what, on.per_step[STEPS].broadcasts, off.per_step[STEPS].broadcasts,
                      off.per_step[STEPS].reduces, off.kept, on.S.load[0] + on.S.load[1]))
end
print(string.format("rank %d: ok", r))
