-- bv.sharding: how a training run spreads over processes (big_vision's sharding.py, for the 1-D
-- "data" mesh and the 2-D {replica, data} one). Every rank computes gradients on its part of the
-- global batch. Per parameter (config.sharding_strategy, the first matching regex decides):
--
--   replicate            every rank keeps it whole with its optimizer state; gradients are
--                        averaged over ranks (one all-reduce) and every rank applies the update.
--   fsdp(axis="data")    parameters, gradients and optimizer state are sharded: each large
--                        parameter, or each layer of a large scanned layer stack, has one owner
--                        rank that alone keeps it between steps. The forward fetches it from its
--                        owner when the model reads it (a broadcast; a scanned model reads a
--                        layer at a time), the backward sends its gradient back (a reduce) and
--                        the owner updates it (bv.dist.fsdp). Parameters below
--                        min_size_to_shard_mb (4) stay replicated, as in big_vision.
--   zero1(axis="data")   only the optimizer state is sharded (ZeRO-1): parameters stay whole on
--                        every rank, gradients are all-reduced, each owner updates its
--                        parameters and broadcasts them. Fewer, larger collectives than fsdp:
--                        the faster choice when parameters and gradients fit on every device.
--
-- config.mesh = {{"replica", R}, {"data", D}} (one size may be -1: the rest of the processes;
-- the names are free, big_vision's are replica and data) makes hybrid sharding: ranks r with the
-- same r // D form a data group (D ranks, one host: the last axis varies fastest, as jax's
-- mesh.devices.flatten()), the ranks with the same r % D a replica group (R ranks, one per data
-- group). fsdp and zero1 name the last axis (fsdp(axis="data")) and shard within each data
-- group: every data group owns the same split, its rank d what data rank d owns. An fsdp
-- gradient is reduced to its owner within the data group, then the owners all-reduce (mean)
-- their shards across their replica group, so the R copies of each shard take the same update;
-- replicated gradients and the loss are averaged over all ranks as on the 1-D mesh. The bytes a
-- rank sends over the replica axis a step are its owned fsdp shards' (replica_bytes_planned);
-- the first step logs them with what was measured (bv.dist's sent_bytes).
--
-- The units go to ranks largest first, each to the least loaded rank. A unit is a whole tensor
-- (so per-tensor optimizer maths, e.g. Adafactor's factored moments, is the single-process
-- one) or, for a scanned stack whose optimizer treats layers independently, one layer.
--
-- What a rank *owns* of a parameter (one word for it here, in the trainers, and in bv.optim's
-- ctx.owned): what it updates and keeps optimizer state for. That is the whole tensor when the
-- parameter is replicated (every rank owns its copy) or when the rank is its owner, the rank's
-- rows (stacked) when it owns some layers of a split stack, and nothing when another rank owns
-- it. S:owned(params) is that table, the one the optimizer updates; bv.dist.fsdp (held here as
-- self.fsdp) calls what a rank owns of an fsdp parameter its `part`.
--
--   local S = sharding.new(config, group)            -- group: bv.dist.init(...) or nil
--   local opt, full_spec = sharding.make_optimizer(S, cfg_json, model:param_shapes(), sched)
--                                                     -- S:plan, then this rank's optimizer
--   params = S:hold(params)                           -- fsdp: keeps what this rank owns
--   loss, grads = S:gradients(params, function(p) return model:loss_and_grads(p, batch) end)
--                                    -- averaged over ranks (sharding_overlap: during the backward)
--   opt:update(S:owned(params), grads); S:sync_params(params)
--   S:full_params(params), S:full_opt_state(opt, full_spec)   -- whole values (collective)
--   opt:load_state_tensor(name, S:owned_opt_tensor(spec_entry, whole))  -- a resume, per tensor
local log = require "bv.log"

local M = {}

local Sharding = {}
Sharding.__index = Sharding

local DTYPE_BYTES = {float32 = 4, float64 = 8, bfloat16 = 2, float16 = 2, int32 = 4, int64 = 8,
                     uint8 = 1, bool = 1, int8 = 1, int16 = 2}

-- 'fsdp(axis="data", min_size_to_shard_mb=4)' | 'zero1(...)' | "replicate" -> {kind, min_bytes}
local function parse_strategy(s, where)
  if s == "replicate" then return {kind = "replicate"} end
  if type(s) ~= "string" then
    error(string.format("%s: a strategy is a string such as 'fsdp(axis=\"data\")', got %s",
                        where, tostring(s)), 0)
  end
  if s == "zero1" then s = "zero1()" end
  local kind, args = s:match("^(%w+)%((.*)%)$")
  if kind ~= "fsdp" and kind ~= "zero1" then
    error(string.format("%s: unknown strategy '%s' (bvlua knows replicate, "
                        .. "fsdp(axis=\"data\") and zero1(axis=\"data\"))", where, s), 0)
  end
  local out = {kind = kind, min_bytes = 4 * 2 ^ 20}  -- big_vision: min_size_to_shard_mb=4
  for key, value in args:gmatch("([%w_]+)%s*=%s*([^,]+)") do
    value = value:gsub("^%s+", ""):gsub("%s+$", "")
    if key == "axis" then
      out.axis = value:match("^[\"'](.-)[\"']$")
      if not out.axis then
        error(string.format("%s: %s's axis must be a quoted mesh axis name, got %s", where, kind,
                            value), 0)
      end
    elseif key == "min_size_to_shard_mb" then
      local mb = tonumber(value)
      if not mb or mb < 0 then error(where .. ": min_size_to_shard_mb must be a number >= 0", 0) end
      out.min_bytes = mb * 2 ^ 20
    else
      error(string.format("%s: %s has no argument '%s'", where, kind, key), 0)
    end
  end
  return out
end

-- config.mesh: big_vision's [("data", -1)] or [("replica", R), ("data", -1)]. Returns the axes
-- {{name, size}, ...} with -1 resolved against `world` processes.
local function parse_mesh(mesh, world)
  if mesh == nil then return {{"data", world}} end
  local usage = "bvlua supports the 1-D data mesh {{'data', -1}} and the 2-D one "
                .. "{{'replica', R}, {'data', -1}}"
  if type(mesh) ~= "table" or (#mesh ~= 1 and #mesh ~= 2) then
    error(string.format("config.mesh: %s; got %s", usage,
                        type(mesh) == "table" and #mesh .. " axes" or tostring(mesh)), 0)
  end
  local axes, known, free = {}, 1, nil
  for i, a in ipairs(mesh) do
    if type(a) ~= "table" or type(a[1]) ~= "string" or math.type(a[2]) ~= "integer"
        or (a[2] < 1 and a[2] ~= -1) then
      local got = type(a) == "table" and string.format("{%s, %s}", tostring(a[1]), tostring(a[2]))
                  or tostring(a)
      error(string.format("config.mesh[%d] must be a {name, size} pair (size an integer >= 1 "
                          .. "or -1), got %s", i, got), 0)
    end
    if a[2] == -1 then
      if free then error("config.mesh: only one axis may have size -1", 0) end
      free = i
    else
      known = known * a[2]
    end
    axes[i] = {a[1], a[2]}
  end
  if #axes == 1 and axes[1][1] ~= "data" then
    error(string.format("config.mesh: %s; its one axis is named '%s'", usage, axes[1][1]), 0)
  end
  if #axes == 2 and axes[1][1] == axes[2][1] then
    error(string.format("config.mesh: two axes named '%s'", axes[1][1]), 0)
  end
  if free then
    if world % known ~= 0 then
      error(string.format("config.mesh: the %s axis has %d devices, which does not divide the "
                          .. "run's %d processes", axes[3 - free][1], known, world), 0)
    end
    axes[free][2] = world // known
  elseif known ~= world then
    local sizes = {}
    for i, a in ipairs(axes) do sizes[i] = string.format("%s %d", a[1], a[2]) end
    error(string.format("config.mesh: the %s axis has %d devices but the run has %d processes",
                        table.concat(sizes, " x "), known, world), 0)
  end
  return axes
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
function M.new(config, group, device)
  local self = setmetatable({group = group, rank = group and group:rank() or 0,
                             world = group and group:world_size() or 1,
                             device = device or "cpu"}, Sharding)
  local axes = parse_mesh(config.mesh, self.world)
  -- The axis fsdp and zero1 shard over (the last), and with two axes the one they replicate
  -- across (the first) and its size.
  self.data_axis = axes[#axes][1]
  self.replica_axis = #axes == 2 and axes[1][1] or nil
  self.replicas = #axes == 2 and axes[1][2] or 1
  check_rules(config.sharding_rules)
  local strategy = config.sharding_strategy or {{".*", "replicate"}}
  if type(strategy) == "string" then strategy = {{".*", strategy}} end
  self.rules = {}
  for i, entry in ipairs(strategy) do
    local where = string.format("config.sharding_strategy[%d]", i)
    if type(entry) ~= "table" or type(entry[1]) ~= "string" then
      error(where .. " must be a {regex, strategy} pair", 0)
    end
    local st = parse_strategy(entry[2], where)
    if st.axis and st.axis ~= self.data_axis then
      if not self.replica_axis then
        error(string.format("%s: %s over axis \"%s\": bvlua's mesh has the 'data' axis only",
                            where, st.kind, st.axis), 0)
      elseif st.axis == self.replica_axis then
        error(string.format("%s: %s over the '%s' axis: bvlua shards over the mesh's last axis "
                            .. "('%s') and replicates across '%s'", where, st.kind, st.axis,
                            self.data_axis, st.axis), 0)
      end
      error(string.format("%s: %s over axis \"%s\": config.mesh has the axes '%s' and '%s'",
                          where, st.kind, st.axis, self.replica_axis, self.data_axis), 0)
    end
    self.rules[i] = {pattern = entry[1], strategy = st}
  end
  self:make_groups()
  self.owner = {}  -- param name -> owning rank (0-based), for sharded parameters only
  -- config.sharding_overlap (default true): the replicated gradients' all-reduce runs during the
  -- backward (bv.dist.grad_buckets); false all-reduces them after it. bucket_mb: the buckets'
  -- size (tests set it smaller).
  local overlap = config.sharding_overlap
  if overlap == nil then overlap = true end
  if type(overlap) ~= "boolean" then
    error("config.sharding_overlap must be true or false, got " .. tostring(overlap), 0)
  end
  self.overlap, self.bucket_mb = overlap, 32
  -- config.sharding_reshard_after_forward (default true): under fsdp with remat, a layer's fetched
  -- parameters go after its forward and are broadcast again for its recomputation; false keeps
  -- them until then (one broadcast a step instead of two; bv.dist.fsdp).
  local reshard = config.sharding_reshard_after_forward
  if reshard == nil then reshard = true end
  if type(reshard) ~= "boolean" then
    error("config.sharding_reshard_after_forward must be true or false, got " .. tostring(reshard),
          0)
  end
  self.reshard_after_forward = reshard
  -- config.sharding_wire_dtype (default "float32"): "bfloat16" sends fsdp's float32 parameters
  -- and their gradients as bfloat16 (bv.dist.fsdp's wire_dtype), and the float32 gradients that
  -- replicate and zero1 all-reduce (see Sharding:gradients).
  local wire = config.sharding_wire_dtype
  if wire == nil then wire = "float32" end
  if wire ~= "float32" and wire ~= "bfloat16" then
    error('config.sharding_wire_dtype must be "float32" or "bfloat16", got ' .. tostring(wire), 0)
  end
  self.wire_dtype = wire
  return self
end

-- The c10d groups of a 2-D mesh (bv.dist's new_subgroups; every rank calls it at once):
-- self.data_group, the ranks sharing this rank's replica index (fsdp and zero1 run there), and
-- self.replica_group, those sharing its data index. On a 1-D mesh the data group is the world.
function Sharding:make_groups()
  self.data_group, self.replica_group = self.group, nil
  local ndata = self.world // self.replicas
  if not self.group or self.replicas == 1 or ndata == 1 then return end
  local data, replica = {}, {}
  for i = 0, self.replicas - 1 do
    local ranks = {}
    for d = 0, ndata - 1 do ranks[#ranks + 1] = i * ndata + d end
    data[#data + 1] = ranks
  end
  for d = 0, ndata - 1 do
    local ranks = {}
    for i = 0, self.replicas - 1 do ranks[#ranks + 1] = i * ndata + d end
    replica[#replica + 1] = ranks
  end
  self.data_group = self.group:new_subgroups(data)
  self.replica_group = self.group:new_subgroups(replica)
  log.note("Mesh %s %d x %s %d: fsdp and zero1 shard within each %s group of %d processes and "
           .. "replicate across the %s axis", self.replica_axis, self.replicas, self.data_axis,
           ndata, self.data_axis, ndata, self.replica_axis)
end

-- The number of ranks a sharded parameter is split over (the data axis), and this rank's index
-- there: its owner index in self.owner.
function Sharding:data_size() return self.world // (self.replicas or 1) end
function Sharding:data_rank() return self.rank % self:data_size() end

function Sharding:strategy_of(name)
  for _, r in ipairs(self.rules) do
    if bv.fullmatch(r.pattern, name) then return r.strategy end
  end
  error(string.format("config.sharding_strategy: no entry matches parameter '%s'", name), 0)
end

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

-- Decides who owns what. shapes: model:param_shapes() ({name, shape, dtype, scan} entries);
-- frozen(name) -> bool (frozen parameters have no optimizer state and stay replicated);
-- rows_ok(name) -> bool: whether the optimizer treats the rows of a scanned stack
-- independently (opt:rows_independent), so that fsdp may give each layer its own owner.
-- Returns name -> owner rank (a whole tensor) or name -> {rank of row 1, rank of row 2, ...}.
function Sharding:plan(shapes, frozen, rows_ok)
  local units = {}
  self.kind, self.owner, self.shapes = {}, {}, {}
  local ndata = self:data_size()
  -- Several processes but a data axis of 1 (mesh {{"replica", N}, {"data", 1}}): nothing to
  -- shard over, every parameter is replicated.
  local shardable = not (self.world > 1 and ndata == 1)
  for _, p in ipairs(shapes) do
    self.shapes[p.name] = p
    local s = self:strategy_of(p.name)
    local bytes = numel(p.shape) * (DTYPE_BYTES[p.dtype] or 4)
    if shardable and s.kind ~= "replicate" and bytes >= s.min_bytes
        and not (frozen and frozen(p.name)) then
      self.kind[p.name] = s.kind
      local rows = p.shape[1] or 1
      if s.kind == "fsdp" and p.scan and rows >= 2 and (not rows_ok or rows_ok(p.name)) then
        self.owner[p.name] = {}
        for r = 1, rows do
          units[#units + 1] = {name = p.name, row = r, bytes = bytes / rows}
        end
      else
        units[#units + 1] = {name = p.name, bytes = bytes}
      end
    end
  end
  table.sort(units, function(a, b)
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    if a.name ~= b.name then return a.name < b.name end
    return (a.row or 0) < (b.row or 0)
  end)
  local load, fsdp_load = {}, {}
  for r = 0, ndata - 1 do load[r], fsdp_load[r] = 0, 0 end
  for _, u in ipairs(units) do
    local best = 0
    for r = 1, ndata - 1 do if load[r] < load[best] then best = r end end
    if u.row then self.owner[u.name][u.row] = best else self.owner[u.name] = best end
    load[best] = load[best] + u.bytes
    if self.kind[u.name] == "fsdp" then fsdp_load[best] = fsdp_load[best] + u.bytes end
  end
  self.load = load  -- data rank -> bytes of parameters it owns
  self.fsdp_load = fsdp_load  -- the same, fsdp's only
  self.sharded = #units > 0 and ndata > 1
  return self.owner
end

-- Whether `rank` updates parameter `name` (all of it or some rows).
function Sharding:updates(name, rank)
  local o = self.owner[name]
  if o == nil then return true end
  if type(o) == "number" then return o == rank end
  for _, r in ipairs(o) do if r == rank then return true end end
  return false
end

-- The rows (1-based) of split parameter `name` that `rank` owns; nil for a whole one.
function Sharding:rows(name, rank)
  local o = self.owner[name]
  if type(o) ~= "table" then return nil end
  local out = {}
  for i, r in ipairs(o) do if r == rank then out[#out + 1] = i end end
  return out
end

-- The {name, shape} list of what this rank owns (its optimizer's parameters): every parameter
-- when nothing is sharded, else the replicated ones, the whole ones it owns, and its rows of
-- split ones.
function Sharding:owned_shapes()
  local out = {}
  for _, name in ipairs(sorted_keys(self.shapes)) do
    local p = self.shapes[name]
    if not self.sharded then
      out[#out + 1] = p
    elseif self:updates(name, self:data_rank()) then
      local rows = self:rows(name, self:data_rank())
      local shape = rows and {#rows, table.unpack(p.shape, 2)} or p.shape
      out[#out + 1] = {name = name, shape = shape, dtype = p.dtype}
    end
  end
  return out
end

-- bv.optim.new's ctx: `base` plus, when sharded, the group that sums the global norms and the
-- replicated parameters (counted once).
function Sharding:opt_ctx(base)
  local ctx = {}
  for k, v in pairs(base) do ctx[k] = v end
  if self.sharded then
    ctx.group = self.data_group  -- every data group holds the whole model once
    ctx.replicated = {}
    for _, name in ipairs(sorted_keys(self.shapes)) do
      if self.owner[name] == nil then table.insert(ctx.replicated, name) end
    end
  end
  return ctx
end

-- Takes full parameters (every rank has the same values) and returns the table the model
-- reads: fsdp parameters become placeholders and this rank keeps only what it owns of them
-- (bv.dist.fsdp); the rest is as given. Call again after replacing the values.
function Sharding:hold(params)
  self.fsdp = nil
  if not self.sharded then return params end
  local specs, out = {}, {}
  for _, name in ipairs(sorted_keys(params)) do
    if self.kind[name] == "fsdp" then
      local o = self.owner[name]
      specs[#specs + 1] = {name = name, value = params[name],
                           owners = type(o) == "table" and o or {o}}
    else
      out[name] = params[name]
    end
  end
  if #specs == 0 then return params end
  self.fsdp = bv.dist.fsdp(self.data_group, specs, {reshard_after_forward = self.reshard_after_forward,
                                                wire_dtype = self.wire_dtype})
  for _, s in ipairs(specs) do out[s.name] = self.fsdp:placeholder(s.name) end
  return out
end

-- What this rank owns, from the model's table: the parameters its optimizer updates (see
-- owned_shapes). Under fsdp it holds what bv.dist.fsdp keeps for this rank (whole tensors or
-- rows), not the model's placeholders.
function Sharding:owned(params)
  if not self.sharded then return params end
  local out = {}
  for name, t in pairs(params) do
    if self.kind[name] == "fsdp" then
      out[name] = self.fsdp:owned(name)  -- nil when this rank owns none of it
    elseif self:updates(name, self:data_rank()) then
      out[name] = t
    end
  end
  return out
end

-- The bv.dist.grad_buckets of the parameters that are not fsdp's (made at the first step), or
-- nil: one process, sharding_overlap = false, or nothing but fsdp parameters.
function Sharding:grad_buckets(params)
  if self.world == 1 or not self.overlap then return nil end
  if self._buckets == nil then
    local names = {}
    for _, name in ipairs(sorted_keys(params)) do
      if not (self.kind and self.kind[name] == "fsdp") then names[#names + 1] = name end
    end
    self._buckets = #names > 0
      and bv.dist.grad_buckets(self.group, names, {bucket_mb = self.bucket_mb,
                                                   wire_dtype = self.wire_dtype}) or false
  end
  return self._buckets or nil
end

-- loss, grads = fn(params) on this rank's part of the batch, made global: the loss (a scalar
-- tensor) and the gradients are averaged over ranks. fsdp's go to their owners during the
-- backward. The others, with the loss: with sharding_overlap, in buckets whose all-reduce starts
-- during the backward as soon as the backward has produced them (bv.dist.grad_buckets watches
-- the loss_and_grads that fn calls); else by one all-reduce per dtype after it (bv.dist cuts it
-- into buckets). Either way the same sums, up to the order in which Gloo or NCCL adds the ranks'
-- float32 values. Nothing is read on the host. Returns the loss and the gradients of what this
-- rank owns.
--
-- sharding_wire_dtype "bfloat16": the float32 gradients of replicate and zero1 travel as
-- bfloat16, on both paths. Each rank rounds its float32 gradient (micro-batches already summed in
-- float32) to bfloat16, the backend sums the ranks' bfloat16 values (each hop's sum rounded to
-- bfloat16: Gloo and NCCL alike), and the sum is converted back to float32 (exactly) and divided
-- by the number of processes in float32. The loss, the metrics and gradients of other dtypes
-- travel as they are.
function Sharding:gradients(params, fn)
  local run = fn
  if self.fsdp then run = function(p) return self.fsdp:run(fn, p) end end
  local buckets, loss, grads = self:grad_buckets(params), nil, nil
  local reduced = false
  if buckets then
    local before = buckets:stats().steps
    loss, grads = buckets:run(run, params)
    -- Every backward that fn ran was averaged (a sum of such steps stays an average).
    reduced = buckets:stats().steps > before
  else
    loss, grads = run(params)
  end
  if self.fsdp then
    local owned = self.fsdp:take_grads()
    for name, g in pairs(owned) do grads[name] = g end
    if self.replica_group then self:replica_mean(owned) end
  end
  if self.world == 1 then return loss, grads end
  if reduced then
    self.overlapped_steps = (self.overlapped_steps or 0) + 1
    return loss, self:drop_unowned(grads)
  end
  local by_dtype = {}
  local function add(t)
    local d = t:dtype()
    by_dtype[d] = by_dtype[d] or {}
    table.insert(by_dtype[d], t)
  end
  loss = loss:reshape({1}):clone()  -- its own storage: reduced in place with the gradients
  add(loss)
  local narrow, narrow_names = {}, {}  -- sharding_wire_dtype bfloat16: the bfloat16 copies
  for _, name in ipairs(sorted_keys(grads)) do
    if self.kind[name] ~= "fsdp" then
      local g = grads[name]
      if self.wire_dtype == "bfloat16" and g:dtype() == "float32" then
        narrow[#narrow + 1], narrow_names[#narrow + 1] = g:to("bfloat16"), name
      else
        add(g)
      end
    end
  end
  for _, d in ipairs(sorted_keys(by_dtype)) do self.group:all_reduce(by_dtype[d], {mean = true}) end
  if #narrow > 0 then
    self.group:all_reduce(narrow, {mean = false})  -- the bfloat16 sum
    for i, name in ipairs(narrow_names) do grads[name] = narrow[i]:to("float32") / self.world end
  end
  return loss:reshape({}), self:drop_unowned(grads)
end

-- 2-D mesh: the fsdp gradients this rank owns, averaged within its data group, averaged again
-- across its replica group (the ranks owning the same shards in the other data groups): the
-- mean over every rank. Counts the bytes sent (self.replica_bytes, this step's) and logs them
-- with the planner's figure at the first step.
function Sharding:replica_mean(owned)
  local before = self.replica_group:sent_bytes()
  local by_dtype = {}
  for _, name in ipairs(sorted_keys(owned)) do
    local d = owned[name]:dtype()
    by_dtype[d] = by_dtype[d] or {}
    table.insert(by_dtype[d], owned[name])
  end
  for _, d in ipairs(sorted_keys(by_dtype)) do
    local ts = by_dtype[d]
    if d == "float32" and self.wire_dtype == "bfloat16" then
      -- As replicate's gradients travel (Sharding:gradients): each rank's shard rounded to
      -- bfloat16, the sum as bfloat16, back to float32 and divided by the replica count there.
      local narrow = {}
      for i, t in ipairs(ts) do narrow[i] = t:to("bfloat16") end
      self.replica_group:all_reduce(narrow, {mean = false})
      local replicas = self.replica_group:world_size()
      for i, t in ipairs(ts) do t:copy_(narrow[i]:to("float32") / replicas) end
    else
      self.replica_group:all_reduce(ts, {mean = true})
    end
  end
  self.replica_bytes = self.replica_group:sent_bytes() - before
  self.replica_steps = (self.replica_steps or 0) + 1
  if self.replica_steps == 1 then
    log.all_ranks.note("Mesh: rank %d (%s %d, %s %d) sent %d bytes over the %s axis in its first "
                       .. "step; planned %d", self.rank, self.replica_axis,
                       self.rank // self:data_size(), self.data_axis, self:data_rank(),
                       self.replica_bytes, self.replica_axis, self:replica_bytes_planned())
  end
end

-- The bytes a step's replica_mean sends from this rank: what its data rank owns of the fsdp
-- parameters (their gradients have the parameters' dtype, and travel in it, float32 as bfloat16
-- under sharding_wire_dtype "bfloat16").
-- 0 without a replica axis.
function Sharding:replica_bytes_planned()
  if not self.replica_group or not self.fsdp_load then return 0 end
  local n = 0
  for _, name in ipairs(sorted_keys(self.owner)) do
    if self.kind[name] == "fsdp" then
      local p = self.shapes[name]
      local size = DTYPE_BYTES[p.dtype] or 4
      if p.dtype == "float32" and self.wire_dtype == "bfloat16" then size = 2 end
      local o, d = self.owner[name], self:data_rank()
      if type(o) == "number" then
        if o == d then n = n + numel(p.shape) * size end
      else
        n = n + #self:rows(name, d) * numel(p.shape) // #o * size
      end
    end
  end
  return n
end

-- zero1: a rank keeps only the averaged gradients of what it updates.
function Sharding:drop_unowned(grads)
  for name in pairs(grads) do
    if self.kind and self.kind[name] == "zero1" and not self:updates(name, self:data_rank()) then
      grads[name] = nil
    end
  end
  return grads
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
-- (SIGTERM to one rank). Returns the signal's name, another rank's request, or false; and,
-- second, whether `also` (a flag of rank 0's: `bvlua attach` has something waiting) is true,
-- which rides in the same all-reduce rather than costing a collective of its own.
function Sharding:stop_requested(also)
  local mine = bv.stop_requested()
  if self.world == 1 then return mine or false, also and true or false end
  local t = bv.tensor({mine and 1 or 0, also and 1 or 0}):to("float64")
  self.group:all_reduce({t}, {mean = false})
  local stop, other = t[1]:item() > 0, t[2]:item() > 0
  if stop then return mine or "a stop request on another rank", other end
  return false, other
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

-- After the update: zero1's owners broadcast their parameters' new values (fsdp's owners keep
-- theirs).
function Sharding:sync_params(params)
  if not self.sharded then return end
  for r = 0, self:data_size() - 1 do
    local by_dtype = {}
    for _, name in ipairs(sorted_keys(self.owner)) do
      if self.kind[name] == "zero1" and self.owner[name] == r then
        local d = params[name]:dtype()
        by_dtype[d] = by_dtype[d] or {}
        table.insert(by_dtype[d], params[name])
      end
    end
    for _, d in ipairs(sorted_keys(by_dtype)) do broadcast(self.data_group, by_dtype[d], r) end
  end
end

-- The whole parameters on every rank (fsdp's gathered from their owners: a collective), for
-- evaluators and checkpoints.
function Sharding:full_params(params)
  if not self.fsdp then return params end
  local out = {}
  for _, name in ipairs(sorted_keys(params)) do
    out[name] = self.kind[name] == "fsdp" and self.fsdp:gather(name) or params[name]
  end
  return out
end

-- Whether a state tensor of `shape` of split parameter `p` runs along its rows (Adafactor's
-- factors, momenta) rather than being one for the whole tensor (a 1-element placeholder).
local function row_aligned(shape, p)
  return #shape >= 1 and shape[1] == p.shape[1]
end

-- The whole optimizer state, for a checkpoint: rank 0 gets name -> tensor (each rank sends it
-- the state of what it owns), the other ranks nil. Collective: every rank must call it.
-- full_spec: the state_spec() of an optimizer over the whole shapes (bv.optim.new(...,
-- {owned = {}}) holds no memory), which tells every rank the shape of what each rank owns.
function Sharding:full_opt_state(opt, full_spec)
  local mine = opt:state()
  if not self.sharded then return self.rank == 0 and mine or nil end
  local spec_of = {}
  for _, s in ipairs(full_spec) do spec_of[s.name] = s end
  local out = self.rank == 0 and {} or nil
  -- On rank 0, into host tensors, one received tensor at a time (the whole state never needs
  -- to fit on one device).
  local function place(s, t, rows)
    if rows and row_aligned(s.shape, self.shapes[s.param]) then
      out[s.name] = out[s.name] or bv.zeros(s.shape, s.dtype)
      for i, row in ipairs(rows) do out[s.name]:select(1, row):copy_(t:select(1, i)) end
    else
      out[s.name] = t:to("cpu")
    end
  end
  if out then
    out.count = mine.count
    for name, t in pairs(mine) do
      if spec_of[name] then place(spec_of[name], t, self:rows(spec_of[name].param, 0)) end
    end
  end
  -- Within the data group: rank 0's (the world's rank 0 on a 2-D mesh) gathers the state, its
  -- peers in the other data groups hold the same and send theirs to nobody that keeps it.
  local me = self:data_rank()
  for r = 1, self:data_size() - 1 do  -- what data rank 0 owns is already in `out`
    local by_dtype = {}
    for _, s in ipairs(full_spec) do
      if self.owner[s.param] ~= nil and self:updates(s.param, r) then
        local rows = self:rows(s.param, r)
        local shape = s.shape
        if rows and row_aligned(s.shape, self.shapes[s.param]) then
          shape = {#rows, table.unpack(s.shape, 2)}
        end
        -- Received where the owner sends from: its device. (A host buffer here would put
        -- the receive in the host group and the send in the device's: a hang on NCCL.)
        local t = (me == r) and mine[s.name] or bv.zeros(shape, s.dtype):to(self.device)
        by_dtype[s.dtype] = by_dtype[s.dtype] or {}
        table.insert(by_dtype[s.dtype], {spec = s, t = t, rows = rows})
      end
    end
    for _, d in ipairs(sorted_keys(by_dtype)) do
      local tensors = {}
      for i, e in ipairs(by_dtype[d]) do tensors[i] = e.t end
      broadcast(self.data_group, tensors, r)
      if out then
        for _, e in ipairs(by_dtype[d]) do place(e.spec, e.t, e.rows) end
      end
    end
  end
  return out
end

-- What this rank owns of `t`, the whole optimizer state tensor of spec entry `s` (an entry of
-- opt:state_spec()): its rows, where this rank updates some rows of a split parameter; else t.
function Sharding:owned_opt_tensor(s, t)
  local rows = self.sharded and self:rows(s.param, self:data_rank())
  if not (rows and row_aligned(t:shape(), self.shapes[s.param])) then return t end
  local picked = {}
  for i, row in ipairs(rows) do picked[i] = t:select(1, row) end
  return bv.stack(picked)
end


-- Plans `shard` for the model's `shapes` and builds this rank's optimizer (bv.optim.new over
-- shard:owned_shapes()). Returns it and the state_spec of the whole optimizer, which
-- full_opt_state needs. `sched`: {total_steps, batch_size, data_size}.
function M.make_optimizer(shard, cfg_json, shapes, sched)
  local ctx = {owned = {}}  -- owns nothing: its state is shapes on the meta device, no memory
  for k, v in pairs(sched) do ctx[k] = v end
  local whole = bv.optim.new(cfg_json, shapes, ctx)
  shard:plan(shapes, function(name) return whole:frozen(name) end,
             function(name) return whole:rows_independent(name) end)
  local opt = bv.optim.new(cfg_json, shard:owned_shapes(), shard:opt_ctx(sched))
  return opt, whole:state_spec()
end

-- Bytes of parameters this rank holds: the model's table (a placeholder is one element) and
-- what it owns of the fsdp parameters.
function Sharding:param_bytes(params)
  local n = 0
  local function add(t) n = n + t:nbytes() end
  for name, t in pairs(params) do
    if self.kind and self.kind[name] == "fsdp" and self.fsdp then
      local owned = self.fsdp:owned(name)
      if owned then add(owned) end
    else
      add(t)
    end
  end
  return n
end

-- Bytes of optimizer state this rank holds (the fsdp memory check).
function M.state_bytes(opt)
  local n = 0
  for _, t in pairs(opt:state()) do n = n + t:numel() * (DTYPE_BYTES[t:dtype()] or 4) end
  return n
end

return M
