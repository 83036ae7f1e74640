-- bv.sharding: how a training run spreads over processes (big_vision's sharding.py, for the 1-D
-- "data" mesh). Every rank computes gradients on its part of the global batch; then
--
--   replicate            gradients are averaged over ranks (one all-reduce); every rank keeps
--                        full parameters and full optimizer state and applies the same update.
--   fsdp(axis="data")    the same average, but each large parameter has one owner rank that
--                        keeps its optimizer state and updates it; the owners then broadcast the
--                        new values. Optimizer state is ~1/N per rank. Whole tensors are the unit
--                        (balanced by size), so per-tensor optimizer maths (Adafactor's factored
--                        moments, clipping) is exactly the single-process one. Parameters are
--                        still whole on every rank during compute. One huge tensor (a scanned
--                        layer stack) can exceed a fair share from 4 ranks on.
--
--   local S = sharding.new(config, group)            -- group: bv.dist.init(...) or nil
--   S:plan(model:param_shapes(), frozen)              -- decides the owners
--   opt = bv.optim.new(cfg_json, shapes, {..., owned = S:owned(shapes)})
--   S:average_grads(grads); opt:update(params, grads); S:sync_params(params)
--   S:full_opt_state(opt)                             -- for checkpoints (collective)
local M = {}

local Sharding = {}
Sharding.__index = Sharding

local DTYPE_BYTES = {float32 = 4, float64 = 8, bfloat16 = 2, float16 = 2, int32 = 4, int64 = 8,
                     uint8 = 1, bool = 1, int8 = 1, int16 = 2}

-- 'fsdp(axis="data", min_size_to_shard_mb=4)' | "replicate" -> {kind, min_bytes}
local function parse_strategy(s, where)
  if s == "replicate" then return {kind = "replicate"} end
  if type(s) ~= "string" then
    error(string.format("%s: a strategy is a string such as 'fsdp(axis=\"data\")', got %s",
                        where, tostring(s)), 0)
  end
  local args = s:match("^fsdp%((.*)%)$")
  if not args then
    error(string.format("%s: unknown strategy '%s' (bvlua knows replicate and "
                        .. "fsdp(axis=\"data\"))", where, s), 0)
  end
  local out = {kind = "fsdp", min_bytes = 4 * 2 ^ 20}  -- big_vision: min_size_to_shard_mb=4
  for key, value in args:gmatch("([%w_]+)%s*=%s*([^,]+)") do
    value = value:gsub("^%s+", ""):gsub("%s+$", "")
    if key == "axis" then
      local axis = value:match("^[\"'](.-)[\"']$")
      if axis ~= "data" then
        error(string.format("%s: fsdp over axis %s: bvlua's mesh has the 'data' axis only",
                            where, value), 0)
      end
    elseif key == "min_size_to_shard_mb" then
      local mb = tonumber(value)
      if not mb or mb < 0 then error(where .. ": min_size_to_shard_mb must be a number >= 0", 0) end
      out.min_bytes = mb * 2 ^ 20
    else
      error(string.format("%s: fsdp has no argument '%s'", where, key), 0)
    end
  end
  return out
end

-- config.mesh: big_vision's [("data", -1)]; bvlua shards over the data axis only.
local function check_mesh(mesh, world)
  if mesh == nil then return end
  if type(mesh) ~= "table" or #mesh ~= 1 or type(mesh[1]) ~= "table" or mesh[1][1] ~= "data" then
    error("config.mesh: bvlua supports the 1-D data mesh {{'data', -1}} only", 0)
  end
  local n = mesh[1][2]
  if n ~= -1 and n ~= world then
    error(string.format("config.mesh: the data axis has %s devices but the run has %d processes",
                        tostring(n), world), 0)
  end
end

-- config.sharding_rules: accepted with big_vision's meaning for activations on the data mesh.
local function check_rules(rules)
  if rules == nil then return end
  if type(rules) ~= "table" then error("config.sharding_rules must be a list of pairs", 0) end
  for i, r in ipairs(rules) do
    if type(r) ~= "table" or type(r[1]) ~= "string" then
      error(string.format("config.sharding_rules[%d] must be a {name, axes} pair", i), 0)
    end
  end
end

-- group: a bv.dist group, or nil for a single process.
function M.new(config, group)
  local self = setmetatable({group = group, rank = group and group:rank() or 0,
                             world = group and group:world_size() or 1}, Sharding)
  check_mesh(config.mesh, self.world)
  check_rules(config.sharding_rules)
  local strategy = config.sharding_strategy or {{".*", "replicate"}}
  if type(strategy) == "string" then strategy = {{".*", strategy}} end
  self.rules = {}
  for i, entry in ipairs(strategy) do
    local where = string.format("config.sharding_strategy[%d]", i)
    if type(entry) ~= "table" or type(entry[1]) ~= "string" then
      error(where .. " must be a {regex, strategy} pair", 0)
    end
    self.rules[i] = {pattern = entry[1], strategy = parse_strategy(entry[2], where)}
  end
  self.owner = {}  -- param name -> owning rank (0-based), for sharded parameters only
  return self
end

function Sharding:strategy_of(name)
  for _, r in ipairs(self.rules) do
    if bv.fullmatch(r.pattern, name) then return r.strategy end
  end
  error(string.format("config.sharding_strategy: no entry matches parameter '%s'", name), 0)
end

-- Decides the owner of every sharded parameter: the largest first, each to the rank that owns
-- the fewest bytes so far. Frozen parameters have no optimizer state and stay replicated.
-- shapes: model:param_shapes() ({name, shape, dtype} entries); frozen(name) -> bool.
function Sharding:plan(shapes, frozen)
  local sharded = {}
  for _, p in ipairs(shapes) do
    local s = self:strategy_of(p.name)
    local n = 1
    for _, d in ipairs(p.shape) do n = n * d end
    local bytes = n * (DTYPE_BYTES[p.dtype] or 4)
    if s.kind == "fsdp" and bytes >= s.min_bytes and not (frozen and frozen(p.name)) then
      sharded[#sharded + 1] = {name = p.name, bytes = bytes}
    end
  end
  table.sort(sharded, function(a, b)
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    return a.name < b.name
  end)
  local load = {}
  for r = 0, self.world - 1 do load[r] = 0 end
  self.owner = {}
  for _, p in ipairs(sharded) do
    local best = 0
    for r = 1, self.world - 1 do if load[r] < load[best] then best = r end end
    self.owner[p.name], load[best] = best, load[best] + p.bytes
  end
  self.sharded = #sharded > 0 and self.world > 1
  return self.owner
end

-- The parameters this rank updates (for bv.optim.new's ctx.owned), or nil when every rank
-- updates every parameter.
function Sharding:owned(shapes)
  if not self.sharded then return nil end
  local out = {}
  for _, p in ipairs(shapes) do
    local o = self.owner[p.name]
    if o == nil or o == self.rank then out[#out + 1] = p.name end
  end
  return out
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

-- Averages the gradients over ranks, in place (one all-reduce per dtype).
function Sharding:average_grads(grads)
  if self.world == 1 then return end
  local by_dtype = {}
  for _, name in ipairs(sorted_keys(grads)) do
    local g = grads[name]
    local d = g:dtype()
    by_dtype[d] = by_dtype[d] or {}
    table.insert(by_dtype[d], g)
  end
  for _, d in ipairs(sorted_keys(by_dtype)) do self.group:all_reduce(by_dtype[d], {mean = true}) end
end

-- Sum (or mean) of a number over ranks.
function Sharding:sum(x)
  if self.world == 1 then return x end
  local t = bv.tensor({x}):to("float64")
  self.group:all_reduce({t}, {mean = false})
  return t[1]:item()
end

function Sharding:mean(x) return self:sum(x) / self.world end

-- True on every rank when it is true on any (a stop request, an error seen by one rank).
function Sharding:any(flag)
  if self.world == 1 then return flag end
  return self:sum(flag and 1 or 0) > 0
end

-- Broadcasts a list of same-dtype tensors from rank `root`, in place. bfloat16 travels as
-- float32 (Gloo has no bfloat16), which holds every bf16 value exactly.
local function broadcast(group, tensors, root)
  if tensors[1]:dtype() ~= "bfloat16" then return group:broadcast(tensors, root) end
  local wide = {}
  for i, t in ipairs(tensors) do wide[i] = t:to("float32") end
  group:broadcast(wide, root)
  for i, t in ipairs(tensors) do t:copy_(wide[i]) end
end

-- bv.stop_requested() agreed by every rank: all stop at the same step when any was asked to
-- (SIGTERM to one rank). Returns the signal's name, another rank's request, or false.
function Sharding:stop_requested()
  local mine = bv.stop_requested()
  if self:any(mine) then return mine or "a stop request on another rank" end
  return false
end

-- Rank 0 gets every rank's string {s_0, s_1, ...} (through the c10d store), the others nil.
-- Collective: every rank calls it, in the same order (the calls are numbered).
function Sharding:gather_strings(s)
  if self.world == 1 then return {s} end
  self._gathers = (self._gathers or 0) + 1
  local key = "bv/gather/" .. self._gathers .. "/"
  if self.rank ~= 0 then
    self.group:set(key .. self.rank, s)
    return nil
  end
  local out = {s}
  for r = 1, self.world - 1 do out[r + 1] = self.group:get(key .. r) end
  return out
end

-- After the update: each owner broadcasts its parameters' new values.
function Sharding:sync_params(params)
  if not self.sharded then return end
  for r = 0, self.world - 1 do
    local by_dtype = {}
    for _, name in ipairs(sorted_keys(self.owner)) do
      if self.owner[name] == r then
        local p = params[name]
        local d = p:dtype()
        by_dtype[d] = by_dtype[d] or {}
        table.insert(by_dtype[d], p)
      end
    end
    for _, d in ipairs(sorted_keys(by_dtype)) do broadcast(self.group, by_dtype[d], r) end
  end
end

-- The whole optimizer state, for a checkpoint: rank 0 gets name -> tensor (the owners broadcast
-- their parts to it), the other ranks nil. Collective: every rank must call it.
function Sharding:full_opt_state(opt)
  local mine = opt:state()
  if not self.sharded then return self.rank == 0 and mine or nil end
  local out = self.rank == 0 and {} or nil
  if out then
    for name, t in pairs(mine) do out[name] = t end
  end
  local spec = opt:state_spec()
  for r = 1, self.world - 1 do  -- rank 0's own part is already in `out`
    local by_dtype = {}
    for _, s in ipairs(spec) do
      if self.owner[s.param] == r then
        local t = (self.rank == r) and mine[s.name] or bv.zeros(s.shape, s.dtype)
        by_dtype[s.dtype] = by_dtype[s.dtype] or {names = {}, tensors = {}}
        table.insert(by_dtype[s.dtype].names, s.name)
        table.insert(by_dtype[s.dtype].tensors, t)
      end
    end
    for _, d in ipairs(sorted_keys(by_dtype)) do
      local part = by_dtype[d]
      broadcast(self.group, part.tensors, r)
      if out then
        for i, name in ipairs(part.names) do out[name] = part.tensors[i] end
      end
    end
  end
  return out
end

-- frozen(name) -> bool from config.schedule (big_vision: the first matching entry decides; a
-- null/false schedule freezes), without building an optimizer.
function M.frozen_fn(config)
  local sched = config.schedule
  if type(sched) ~= "table" or sched[1] == nil or type(sched[1]) ~= "table" then
    return function() return false end
  end
  return function(name)
    for _, e in ipairs(sched) do
      if bv.fullmatch(e[1], name) then return not e[2] or e[2] == bv.null end
    end
    return false
  end
end

-- Bytes of optimizer state this rank holds (the fsdp memory check).
function M.state_bytes(opt)
  local n = 0
  for _, t in pairs(opt:state()) do n = n + t:numel() * (DTYPE_BYTES[t:dtype()] or 4) end
  return n
end

return M
