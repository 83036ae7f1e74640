-- A rank of tests/cli/dist_launch_test.sh (`bvlua launch --nproc 2 -- run` this file), on the
-- fake device: rank 1 owns no parameter (sharded parameters fewer than the ranks), yet takes
-- part in the global norm's sum. Its zero must be a device tensor, as rank 0's part is: a host
-- one goes to the host group, which on NCCL hangs and here fails the collective check
-- (BV_CHECK_COLLECTIVES=1). Prints "ok <l2_grads>" on rank 0.
bv._fake_device()
local r = bv.dist.env().rank
local device = "fake:" .. (r % 2)
bv.set_device(device)
local g = bv.dist.init{backend = "gloo", timeout = 20}
-- As bv.sharding builds them: each rank's optimizer over the shapes it owns (none on rank 1).
local shapes = r == 0 and {{name = "w", shape = {4}}} or {}
local opt = bv.optim.new('{"optax_name": "scale_by_adam", "lr": 0.1, "grad_clip_norm": 1.0, '
                         .. '"schedule": {}}', shapes, {total_steps = 1, device = device, group = g})
local params, grads = {}, {}
if r == 0 then
  params.w = bv.zeros({4}):to(device)
  grads.w = bv.full({4}, 3.0):to(device)  -- norm 6: clipped to 1
end
local m = opt:update(params, grads, {norms = true})
assert(math.abs(m.l2_grads - 6) < 1e-5, "rank " .. r .. ": l2_grads " .. m.l2_grads)
if r == 0 then print("ok " .. m.l2_grads) end
