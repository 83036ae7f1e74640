-- A rank of tests/cli/mesh_train_test.sh (`bvlua launch --nproc 4 -- run` this file [fake]):
-- bv.dist's subgroups as big_vision's mesh {replica 2, data 2} makes them. The data groups
-- {0, 1}, {2, 3} and the replica groups {0, 2}, {1, 3}: all_reduce, broadcast and the store stay
-- within a group, two groups' collectives run at the same time without mixing, sent_bytes counts
-- what this rank sent, a rank in no group gets nil, bad lists fail naming the rank, and
-- bv.dist.fsdp runs on a subgroup. "fake": on the test device (two Gloo groups per group, as
-- NCCL and its host group). Prints "rank R: ok" or fails.
local device = "cpu"
if arg[1] == "fake" then
  bv._fake_device()
  device = "fake:" .. (bv.dist.env().rank % 2)
  bv.set_device(device)
end
local g = bv.dist.init{backend = "gloo", timeout = 60}
local r, world = g:rank(), g:world_size()
assert(world == 4, "run with --nproc 4")
local where = "rank " .. r

local data = g:new_subgroups({{0, 1}, {2, 3}})
local replica = g:new_subgroups({{0, 2}, {1, 3}})
assert(data:world_size() == 2 and data:rank() == r % 2, where .. ": data rank " .. data:rank())
assert(replica:world_size() == 2 and replica:rank() == r // 2,
       where .. ": replica rank " .. replica:rank())
assert(tostring(data):find("rank " .. r % 2 .. " of 2", 1, true), tostring(data))

-- Sums within each group: data group i holds ranks 2i and 2i + 1, replica group d ranks d, d + 2.
local t = bv.full({3}, r + 1.0):to(device)
data:all_reduce({t})
local want = (r // 2) * 4 + 3  -- (2i + 1) + (2i + 2)
assert(t:to("cpu"):equal(bv.full({3}, want + 0.0)), where .. ": data sum " .. t:to("cpu"):format())
local u = bv.full({5}, r + 1.0):to(device)
replica:all_reduce({u}, {mean = true})
local umean = ((r % 2) + 1 + (r % 2) + 3) / 2
assert(u:to("cpu"):equal(bv.full({5}, umean)), where .. ": replica mean " .. u:to("cpu"):format())
-- A broadcast from the group's rank 1 (world ranks 1 and 3 in the data groups).
local b = bv.full({2}, r * 10.0):to(device)
data:broadcast({b}, 1)
assert(b:to("cpu"):equal(bv.full({2}, ((r // 2) * 2 + 1) * 10.0)), where .. ": broadcast")
-- Bytes sent: the all-reduce's 12 on every data rank plus the broadcast's 8 on its root; 20 on
-- every replica rank; the world group sent nothing yet.
local T_data = data:sent_bytes()
assert(T_data == 12 + (r % 2 == 1 and 8 or 0), where .. ": data sent " .. T_data)
assert(replica:sent_bytes() == 20, where .. ": replica sent " .. replica:sent_bytes())
assert(g:sent_bytes() == 0, where .. ": world sent " .. g:sent_bytes())
-- The store: a key set in one data group is not seen in the other's.
data:set("k", "group " .. r // 2)
assert(data:get("k") == "group " .. r // 2, where .. ": store " .. data:get("k"))
data:barrier()

-- Ranks in no group get nil; a rank twice or out of range names itself.
local pair = g:new_subgroups({{3, 0}})
if r == 0 or r == 3 then
  assert(pair and pair:world_size() == 2 and pair:rank() == (r == 3 and 0 or 1), where .. ": pair")
  local x = bv.full({1}, r + 0.0):to(device)
  pair:all_reduce({x})
  assert(x:to("cpu"):item() == 3, where .. ": pair sum")
else
  assert(pair == nil, where .. ": in no group")
end
local ok, err = pcall(g.new_subgroups, g, {{0, 1}, {1, 2}})
assert(not ok and tostring(err):find("rank 1 is in group 1 and in group 2", 1, true), tostring(err))
ok, err = pcall(g.new_subgroups, g, {{0, 4}})
assert(not ok and tostring(err):find("rank 4 of group 1 is not a rank of this group", 1, true),
       tostring(err))

-- fsdp on a data group: owners are data ranks; a read gets the owner's value, a gradient is
-- averaged within the group.
local w = bv.randn({4, 3}, bv.rng(7)):to(device)
local fs = bv.dist.fsdp(data, {{name = "w", value = w, owners = {1}}})
local got = fs:run(function() return fs:read("w") end)
assert(got:to("cpu"):equal(w:to("cpu")), where .. ": fsdp read on a subgroup")
g:barrier()
print(where .. ": ok")
