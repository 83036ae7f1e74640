-- bv.dist in a single process (no RANK/WORLD_SIZE set): the environment, a group of one whose
-- collectives are identities, the in-process store, and argument errors that name the culprit.
-- Real multi-process groups: tests/cpp/dist_test.cpp and tests/cli/dist_launch_test.sh.
local T = require "tests.lua.lib.testing"

T.test("env without torchrun's variables is one process", function()
  local e = bv.dist.env()
  T.eq(e.rank, 0)
  T.eq(e.world_size, 1)
  T.eq(e.local_rank, 0)
  T.eq(e.master_addr, "")
end)

T.test("a group of one", function()
  local g = bv.dist.init{backend = "gloo", timeout = 5}
  T.eq(g:rank(), 0)
  T.eq(g:world_size(), 1)
  T.eq(g:backend(), "gloo")
  T.truthy(tostring(g):find("rank 0 of 1", 1, true), tostring(g))
  local a, b = bv.full({2, 2}, 1.5), bv.arange(3):to("float32")
  g:all_reduce({a, b}, {mean = true})
  T.eq(a:totable(), {{1.5, 1.5}, {1.5, 1.5}})
  T.eq(b:totable(), {0.0, 1.0, 2.0})
  g:all_reduce(a)  -- one tensor, not in a list
  g:broadcast({a}, 0)
  g:barrier()
  g:set("stop", "1")
  T.eq(g:get("stop"), "1")
  local quick = bv.dist.init{timeout = 0.2}
  T.raises(function() quick:get("never") end,
           "get('never') failed on rank 0 of 1 (gloo): no rank set the key")
end)

T.test("check: whether the store has a key now, without waiting", function()
  local g = bv.dist.init{backend = "gloo", timeout = 5}
  local start = bv.clock()
  T.eq(g:check("request"), false)
  T.truthy(bv.clock() - start < 1, "check waited for the key")
  g:set("request", "")
  T.eq(g:check("request"), true)
  T.eq(g:check("other"), false)
  T.eq(bv.dist.init{}:check("request"), false)  -- each group of one has its own store
  T.raises(function() g:check() end, "bad argument #1 to 'check'")
end)

T.test("errors name the argument", function()
  T.raises(function() bv.dist.init{backend = "mpi"} end, "backend 'mpi'")
  T.raises(function() bv.dist.init{timout = 5} end, "unknown option 'timout'")
  local g = bv.dist.init{}
  T.raises(function() g:all_reduce({bv.ones({2}), 3}) end, "element 2 is a number")
  T.raises(function() g:all_reduce({bv.ones({2})}, {mean = 1}) end, "'mean' must be a boolean")
  T.raises(function() g:all_reduce({bv.ones({2}, "int64")}, {mean = true}) end, "floating-point")
  T.raises(function() g:broadcast({bv.ones({2})}, 1) end, "root 1")
  T.raises(function() bv.dist.launch({}, 2) end, "command is empty")
  T.raises(function() bv.dist.launch({"/bin/true"}, 0) end, "nproc")
end)

T.test("fsdp in one process: placeholders resolve to the parts, gradients reach them", function()
  local g = bv.dist.init{backend = "gloo", timeout = 5}
  local m = bv.models.build("vit", {variant = "mu/4", depth = 2, image_size = 8, num_classes = 3,
                                    scan = true, head_zeroinit = false})
  local p = m:init(0)
  local x, y = bv.randn({2, 8, 8, 3}, bv.rng(1)), bv.tensor({{1.0, 0, 0}, {0, 1.0, 0}})
  local loss0, grads0 = m:loss_and_grads(p, {image = x, labels = y})
  local stack = "Transformer/encoderblock/MlpBlock_0/Dense_0/kernel"
  local fs = bv.dist.fsdp(g, {{name = stack, value = p[stack], owners = {0, 0}},
                              {name = "head/kernel", value = p["head/kernel"], owners = {0}}})
  local held = {}
  for k, v in pairs(p) do held[k] = v end
  held[stack], held["head/kernel"] = fs:placeholder(stack), fs:placeholder("head/kernel")
  T.truthy(fs:owned(stack):equal(p[stack]), "one process owns all of it")
  local loss1, grads1 = fs:run(m.loss_and_grads, m, held, {image = x, labels = y})
  T.near(loss1:item(), loss0:item(), 1e-6)
  local mine = fs:take_grads()
  T.truthy(mine[stack]:allclose(grads0[stack], 1e-5, 1e-7), "the stack's gradient")
  T.truthy(mine["head/kernel"]:allclose(grads0["head/kernel"], 1e-5, 1e-7), "the head's gradient")
  T.eq(grads1[stack], nil)  -- the placeholder itself gets none
  T.truthy(fs:gather(stack):equal(p[stack]), "gather")
  -- Prefetch: the first run set the script (layer 0, layer 1, the head; then the backward's
  -- remat reads layer 1 and layer 0 again); a second run with the same reads gets every read but
  -- its first from a prefetch, and the same loss and gradients.
  T.eq(fs:prefetched(), 0)
  fs:take_grads()
  local loss2 = fs:run(m.loss_and_grads, m, held, {image = x, labels = y})
  T.eq(fs:prefetched(), 4)
  T.eq(loss2:item(), loss1:item())
  T.truthy(fs:take_grads()[stack]:allclose(grads0[stack], 1e-5, 1e-7), "gradient, prefetched")
  T.eq(next(fs:take_grads()), nil)  -- taken: the next step starts from none
  -- Outside run(), a placeholder is what it is: zeros of the right shape.
  T.eq(held[stack]:abs():max():item(), 0)
  T.raises(function() fs:placeholder("w") end, "no sharded parameter named 'w'")
  T.raises(function() bv.dist.fsdp(g, {{name = "w", value = bv.zeros({2}), owners = {1}}}) end,
           "owner 1 of 'w' is not a rank")
  T.raises(function() bv.dist.fsdp(g, {{name = "w", value = bv.zeros({2, 3}), owners = {0, 0, 0}}}) end,
           "needs one owner or one per row of dim 0")
  T.raises(function() bv.dist.fsdp(g, {{name = "w", owners = {0}}}) end, "'w' has no value tensor")
end)

T.test("launch runs a command as N ranks and returns its exit code", function()
  T.eq(bv.dist.launch({"/bin/sh", "-c", "exit 0"}, 2, {grace = 1}), 0)
  T.eq(bv.dist.launch({"/bin/sh", "-c", '[ "$RANK" = 1 ] && exit 5; exit 0'}, 2, {grace = 1}), 5)
  T.truthy(bv.dist.executable():find("bvlua", 1, true), bv.dist.executable())
end)

T.run()
