-- A rank of tests/cli/dist_check_test.sh (`bvlua launch --nproc 2 -- run` this file [fake]):
-- g:check(key) sees another rank's g:set at once and never waits for a key that is not there; a
-- subgroup's keys live under its own store prefix (the parent does not see them, nor it the
-- parent's). Prints "rank R: ok" or fails.
local rank = require "tests.lua.dist.rank"
local _, g = rank.start(arg[1])
local r = g:rank()
assert(g:world_size() == 2, "run with --nproc 2")
local where = "rank " .. r

assert(g:check("from1") == false, where .. ": 'from1' before anyone set it")
g:barrier()
if r == 1 then g:set("from1", "x") end
g:barrier()
assert(g:check("from1") == true, where .. ": rank 1's 'from1' not seen")

local sub = g:new_subgroups({{1, 0}})
assert(sub:check("from1") == false, where .. ": the subgroup sees the parent's 'from1'")
if r == 0 then sub:set("from0", "y") end
g:barrier()
assert(sub:check("from0") == true, where .. ": rank 0's 'from0' not seen in the subgroup")
assert(g:check("from0") == false, where .. ": the parent sees the subgroup's 'from0'")
print(string.format("rank %d: ok", r))
