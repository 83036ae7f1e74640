-- bv.sharding without processes: big_vision's mesh/strategy keys and their errors, who owns
-- which parameter under fsdp, and the single-process collectives (plain arithmetic).
local T = require "tests.lua.lib.testing"
local sharding = require "bv.sharding"

local function shapes()
  return {{name = "big/kernel", shape = {1024, 1024}, dtype = "float32"},      -- 4 MiB
          {name = "mid/kernel", shape = {1024, 512}, dtype = "float32"},       -- 2 MiB
          {name = "mid2/kernel", shape = {1024, 512}, dtype = "float32"},      -- 2 MiB
          {name = "frozen/kernel", shape = {1024, 1024}, dtype = "float32"},
          {name = "tiny/bias", shape = {16}, dtype = "float32"}}
end

local function planned(strategy, world, frozen)
  local s = sharding.new({sharding_strategy = strategy}, nil)
  s.world = world  -- planning only: no process group
  return s, s:plan(shapes(), frozen)
end

T.test("fsdp: the largest first, each to the least loaded rank; small and frozen stay replicated", function()
  local frozen = function(name) return name:find("^frozen/") ~= nil end
  local s, owner = planned({{".*", 'fsdp(axis="data", min_size_to_shard_mb=1)'}}, 2, frozen)
  T.eq(owner["big/kernel"], 0)
  T.eq(owner["mid/kernel"], 1)
  T.eq(owner["mid2/kernel"], 1)
  T.eq(owner["frozen/kernel"], nil)
  T.eq(owner["tiny/bias"], nil)      -- below min_size_to_shard_mb
  T.truthy(s.sharded, "sharded")
  T.eq(s.load, {[0] = 4 * 2 ^ 20, [1] = 4 * 2 ^ 20})
  s.rank = 1
  local mine = {}
  for _, p in ipairs(s:owned_shapes()) do mine[#mine + 1] = p.name end
  T.eq(mine, {"frozen/kernel", "mid/kernel", "mid2/kernel", "tiny/bias"})
  T.eq(s:opt_ctx({total_steps = 3}).replicated, {"frozen/kernel", "tiny/bias"})
  -- big_vision's default threshold (4 MiB) keeps the 2 MiB ones replicated.
  local _, owner4 = planned('fsdp(axis="data")', 2)
  T.eq(owner4["big/kernel"], 0)
  T.eq(owner4["mid/kernel"], nil)
  -- Per-regex strategies: the first match decides.
  local _, mixed = planned({{"big/.*", "replicate"}, {".*", 'fsdp(axis="data", min_size_to_shard_mb=0)'}}, 2)
  T.eq(mixed["big/kernel"], nil)
  T.truthy(mixed["tiny/bias"] ~= nil, "tiny sharded with a 0 threshold")
  local z = planned({{".*", "zero1"}}, 2)
  T.eq(z.kind["big/kernel"], "zero1")
end)

T.test("fsdp splits a scanned stack by layer when the optimizer treats layers apart", function()
  local stack = {{name = "enc/kernel", shape = {4, 512, 512}, dtype = "float32", scan = true},  -- 4 MiB
                 {name = "head/kernel", shape = {1024, 1024}, dtype = "float32"}}              -- 4 MiB
  local s = sharding.new({sharding_strategy = 'fsdp(axis="data", min_size_to_shard_mb=1)'}, nil)
  s.world = 2
  local owner = s:plan(stack)
  T.eq(owner["head/kernel"], 0)
  T.eq(owner["enc/kernel"], {1, 1, 1, 1})  -- rank 0 already holds 4 MiB
  T.eq(s:rows("enc/kernel", 1), {1, 2, 3, 4})
  s.world = 3
  owner = s:plan(stack)
  T.eq(owner["enc/kernel"], {1, 2, 1, 2})
  s.rank = 2
  T.eq(s:owned_shapes()[1], {name = "enc/kernel", shape = {2, 512, 512}, dtype = "float32"})
  T.truthy(not s:updates("head/kernel", 2) and s:updates("enc/kernel", 2), "rank 2 updates")
  -- An optimizer that mixes rows (Adafactor factoring dim 1, clipping) keeps the stack whole.
  owner = s:plan(stack, nil, function() return false end)
  T.eq(type(owner["enc/kernel"]), "number")
end)

T.test("owned: what this rank updates (fsdp: in self.fsdp; the model sees placeholders)", function()
  local s = sharding.new({sharding_strategy = 'fsdp(axis="data", min_size_to_shard_mb=1)'},
                         bv.dist.init{backend = "gloo", timeout = 5})
  s.world = 2  -- planned for two ranks; rank 0 owns the one large parameter: one process holds it
  s:plan({{name = "big/kernel", shape = {1024, 1024}, dtype = "float32"},
          {name = "tiny/bias", shape = {16}, dtype = "float32"}})
  T.eq(s.owner["big/kernel"], 0)
  local params = {["big/kernel"] = bv.ones({1024, 1024}), ["tiny/bias"] = bv.zeros({16})}
  local held = s:hold(params)
  T.truthy(s.fsdp ~= nil, "the fsdp parameters")
  T.eq(held["big/kernel"]:abs():max():item(), 0)  -- a placeholder
  local owned = s:owned(held)
  T.truthy(owned["big/kernel"]:equal(params["big/kernel"]), "the owned value, not the placeholder")
  T.truthy(owned["tiny/bias"] == held["tiny/bias"], "replicated: every rank owns its copy")
  T.truthy(s:full_params(held)["big/kernel"]:equal(params["big/kernel"]), "gathered whole")
  T.eq(s:param_bytes(held), 4 * 1024 * 1024 + 16 * 4)  -- what it owns, not the placeholder
end)

T.test("replicate, or a single process: every rank updates everything", function()
  local s = planned({{".*", "replicate"}}, 2)
  T.truthy(not s.sharded, "nothing sharded")
  T.eq(#s:owned_shapes(), #shapes())
  local params = {w = bv.zeros({2})}
  T.truthy(s:hold(params) == params and s:owned(params) == params, "the same table")
  local one = sharding.new({sharding_strategy = {{".*", 'fsdp(axis="data")'}}}, nil)
  one:plan(shapes())
  T.truthy(not one.sharded, "one process: nothing sharded")
  T.eq(one:opt_ctx({total_steps = 3}), {total_steps = 3})
  local loss, grads = one:gradients(params, function(p) return 1.5, {w = p.w} end)
  T.eq(loss, 1.5)
  T.truthy(grads.w == params.w, "gradients as given")
  T.eq(one:sum(2.5), 2.5)
  T.eq(one:mean(2.5), 2.5)
  T.eq(one:any(false), false)
  T.eq(one:gather_strings("x"), {"x"})
end)

T.test("bad mesh, strategy or rules name themselves", function()
  T.raises(function() sharding.new({mesh = {{"model", 2}}}, nil) end, "1-D data mesh")
  T.raises(function() sharding.new({mesh = {{"data", 4}}}, nil) end, "the run has 1 processes")
  T.raises(function() sharding.new({sharding_strategy = {{".*", "zero3"}}}, nil) end,
           "config.sharding_strategy[1]: unknown strategy 'zero3'")
  T.raises(function() sharding.new({sharding_strategy = {{".*", 'zero1(axis="model")'}}}, nil) end,
           "zero1 over axis")
  T.raises(function() sharding.new({sharding_strategy = {{".*", 'fsdp(axis="model")'}}}, nil) end,
           "the 'data' axis only")
  T.raises(function() sharding.new({mesh = {{"a", 1}, {"b", 1}, {"data", -1}}}, nil) end,
           "config.mesh: bvlua supports the 1-D data mesh {{'data', -1}} and the 2-D one")
  T.raises(function() sharding.new({sharding_strategy = {{".*", 'fsdp(axis="data", foo=1)'}}}, nil) end,
           "fsdp has no argument 'foo'")
  T.raises(function() sharding.new({sharding_rules = {"act_batch"}}, nil) end,
           "config.sharding_rules[1] must be a {name, axes} pair")
  T.raises(function() sharding.new({sharding_reshard_after_forward = "no"}, nil) end,
           "config.sharding_reshard_after_forward must be true or false, got no")
  T.eq(sharding.new({}, nil).reshard_after_forward, true)
  T.eq(sharding.new({sharding_reshard_after_forward = false}, nil).reshard_after_forward, false)
  T.raises(function() sharding.new({sharding_wire_dtype = "float16"}, nil) end,
           'config.sharding_wire_dtype must be "float32" or "bfloat16", got float16')
  T.raises(function() sharding.new({sharding_wire_dtype = true}, nil) end,
           'config.sharding_wire_dtype must be "float32" or "bfloat16", got true')
  T.eq(sharding.new({}, nil).wire_dtype, "float32")
  T.eq(sharding.new({sharding_wire_dtype = "bfloat16"}, nil).wire_dtype, "bfloat16")
  local s = sharding.new({sharding_strategy = {{"img/.*", "replicate"}}}, nil)
  T.raises(function() s:plan(shapes()) end, "no entry matches parameter")
  sharding.new({mesh = {{"data", -1}}, sharding_rules = {{"act_batch", {"data"}}}}, nil)  -- fine
end)

-- A process group for planning: rank `rank` of `world`, recording the splits asked of it.
local function fake_group(rank, world)
  local g = {splits = {}}
  function g:rank() return rank end
  function g:world_size() return world end
  function g:backend() return "gloo" end
  function g:new_subgroups(groups)
    table.insert(self.splits, groups)
    for _, ranks in ipairs(groups) do
      for i, r in ipairs(ranks) do
        if r == rank then return {name = #self.splits, rank = i - 1, size = #ranks} end
      end
    end
  end
  return g
end

T.test("2-D mesh: fsdp within each data group, owners by data rank, bytes over the replica axis", function()
  local mesh = {{"replica", 2}, {"data", -1}}
  local g = fake_group(3, 4)
  local s = sharding.new({mesh = mesh, sharding_strategy = 'fsdp(axis="data", min_size_to_shard_mb=1)'}, g)
  -- big_vision's device order: the last axis varies fastest (rank r: replica r // 2, data r % 2).
  T.eq(g.splits, {{{0, 1}, {2, 3}}, {{0, 2}, {1, 3}}})
  T.eq({s.data_group.name, s.data_group.rank, s.replica_group.name, s.replica_group.rank},
       {1, 1, 2, 1})
  T.eq({s:data_size(), s:data_rank(), s.replicas}, {2, 1, 2})
  local owner = s:plan(shapes())
  -- The same split as 2 processes on the 1-D mesh: owners are data ranks.
  local one_d = planned('fsdp(axis="data", min_size_to_shard_mb=1)', 2)
  T.eq(owner, one_d.owner)
  T.eq({owner["big/kernel"], owner["frozen/kernel"], owner["mid/kernel"], owner["mid2/kernel"]},
       {0, 1, 0, 1})
  T.truthy(s.sharded, "sharded")
  T.eq(s:opt_ctx({}).group, s.data_group)  -- global norms: summed within the data group
  local mine = {}
  for _, p in ipairs(s:owned_shapes()) do mine[#mine + 1] = p.name end
  T.eq(mine, {"frozen/kernel", "mid2/kernel", "tiny/bias"})
  -- Data rank 1 owns frozen (4 MiB) and mid2 (2 MiB): their float32 gradients cross the replica
  -- axis.
  T.eq(s:replica_bytes_planned(), 6 * 2 ^ 20)
  -- One data rank per data group: nothing to shard over, nothing split, no groups.
  local r = sharding.new({mesh = {{"replica", -1}, {"data", 1}}, sharding_strategy = 'fsdp(axis="data", min_size_to_shard_mb=0)'}, fake_group(0, 2))
  r:plan(shapes())
  T.truthy(not r.sharded and next(r.owner) == nil and r.replica_group == nil, "replicated")
  -- Any names: the last axis is the one sharded over (big_vision's jet configs: replica, fsdp).
  local f = sharding.new({mesh = {{"replica", 2}, {"fsdp", -1}}, sharding_strategy = 'fsdp(axis="fsdp")'}, fake_group(0, 4))
  T.eq(f.data_axis, "fsdp")
  -- A 1-D mesh stays as it was: the data group is the world, no replica group.
  local w = fake_group(1, 2)
  local one = sharding.new({mesh = {{"data", -1}}}, w)
  T.truthy(one.data_group == w and one.replica_group == nil and #w.splits == 0, "1-D")
end)

T.test("2-D mesh errors name the key", function()
  local function new(cfg, world) return sharding.new(cfg, fake_group(0, world)) end
  T.raises(function() new({mesh = {{"replica", 3}, {"data", -1}}}, 4) end,
           "config.mesh: the replica axis has 3 devices, which does not divide the run's 4 processes")
  T.raises(function() new({mesh = {{"replica", 2}, {"data", 3}}}, 4) end,
           "config.mesh: the replica 2 x data 3 axis has 6 devices but the run has 4 processes")
  T.raises(function() new({mesh = {{"replica", -1}, {"data", -1}}}, 4) end,
           "config.mesh: only one axis may have size -1")
  T.raises(function() new({mesh = {{"data", 2}, {"data", 2}}}, 4) end, "two axes named 'data'")
  T.raises(function() new({mesh = {{"replica", 2}, {"data", 0}}}, 4) end,
           "config.mesh[2] must be a {name, size} pair")
  T.raises(function()
    new({mesh = {{"replica", 2}, {"data", -1}}, sharding_strategy = 'fsdp(axis="replica")'}, 4)
  end, "config.sharding_strategy[1]: fsdp over the 'replica' axis: bvlua shards over the mesh's last axis ('data')")
  T.raises(function()
    new({mesh = {{"replica", 2}, {"data", -1}}, sharding_strategy = {{".*", 'zero1(axis="model")'}}}, 4)
  end, "config.sharding_strategy[1]: zero1 over axis \"model\": config.mesh has the axes 'replica' and 'data'")
end)

T.run()
