-- bv.dist in a single process (no RANK/WORLD_SIZE set): the environment, a group of one whose
-- collectives are identities, the in-process store, and argument errors that name the culprit.
-- Real multi-process groups: tests/cpp/dist_test.cpp and tests/cli/dist_launch_test.sh.
local T = require "bv.testing"

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

T.test("launch runs a command as N ranks and returns its exit code", function()
  T.eq(bv.dist.launch({"/bin/sh", "-c", "exit 0"}, 2, {grace = 1}), 0)
  T.eq(bv.dist.launch({"/bin/sh", "-c", '[ "$RANK" = 1 ] && exit 5; exit 0'}, 2, {grace = 1}), 5)
  T.truthy(bv.dist.executable():find("bvlua", 1, true), bv.dist.executable())
end)

T.run()
