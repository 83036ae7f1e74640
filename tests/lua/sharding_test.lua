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

T.run()
