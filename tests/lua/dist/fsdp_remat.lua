-- A rank of tests/cli/dist_launch_test.sh (`bvlua launch --nproc 2 -- run` this file): fsdp's
-- gradients under remat equal one process's, whether a scanned stack is split by layer or kept
-- as whole units (a whole unit read inside a rematerialised layer is fetched twice: without
-- gradients in the forward, with them in the backward's recompute), and a second step whose
-- reads are served by prefetches gives the same gradients. Prints "rank R: ok" or fails.
local sharding = require "bv.sharding"
local g = bv.dist.init{backend = "gloo", timeout = 60}
local r = g:rank()
local m = bv.models.build("vit", {width = 32, depth = 3, mlp_dim = 64, num_heads = 2,
                                  patch_size = 4, image_size = 16, scan = true, num_classes = 3,
                                  head_zeroinit = false})
local x = bv.randn({4, 16, 16, 3}, bv.rng(1))
local labels = bv.tensor({{1.0, 0, 0}, {0, 1.0, 0}, {0, 0, 1.0}, {1.0, 0, 0}})
local function step(p, lo, hi)
  return m:loss_and_grads(p, {image = x[{{lo, hi}}], labels = labels[{{lo, hi}}]},
                          {loss = "softmax_xent"})
end
local _, want_all = step(m:init(0), 1, 4)  -- the whole batch in one process

for _, split in ipairs({false, true}) do
  local what = split and "split by layer" or "whole units"
  local S = sharding.new({sharding_strategy = 'fsdp(axis="data", min_size_to_shard_mb=0)'}, g)
  S:plan(m:param_shapes(), nil, function() return split end)
  local held = S:hold(m:init(0))
  local lo = r * 2 + 1
  for attempt = 1, 2 do  -- the second step's reads come from prefetches
    local _, grads = S:gradients(held, function(p) return step(p, lo, lo + 1) end)
    for _, p in ipairs(m:param_shapes()) do
      if S:updates(p.name, r) then
        local got = grads[p.name] or error(string.format("rank %d, %s, step %d: no gradient for %s",
                                                         r, what, attempt, p.name))
        local want = want_all[p.name]
        local rows = S:rows(p.name, r)
        if rows then
          local picked = {}
          for i, row in ipairs(rows) do picked[i] = want:select(1, row) end
          want = bv.stack(picked)
        end
        local d = (got - want):abs():max():item()
        assert(d < 1e-5, string.format("rank %d, %s, step %d: %s differs by %g", r, what,
                                       attempt, p.name, d))
      end
    end
  end
  assert(S.fsdp:prefetched() > 0, what .. ": the second step used no prefetch")
end
print(string.format("rank %d: ok", r))
