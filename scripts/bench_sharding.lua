-- The sharding benchmark's per-rank side (scripts/bench's sharding section runs it under
-- `bvlua launch`):
--   bvlua launch --nproc N run scripts/bench_sharding.lua STRATEGY STEPS [OVERLAP [LAYERS]]
-- trains a ViT-B/16 (86M parameters, Adam) on random 32x32 images for STEPS steps with
-- config.sharding_strategy = STRATEGY, and prints rank 0's steps/s and every rank's peak
-- resident memory during training (VmHWM, reset after set-up). OVERLAP: "overlap" (the default)
-- or "no-overlap", config.sharding_overlap. LAYERS: "scan" (the default: one stacked parameter
-- per weight of the encoder blocks, rematerialised) or "layers" (a parameter per block and
-- weight, so that the backward finishes the last block's gradients while the first block's are
-- still to come: what the overlap needs).
local json = require "bv.json"
local sharding = require "bv.sharding"
local strategy, steps = arg[1], tonumber(arg[2] or 4)
local overlap, layers = arg[3] or "overlap", arg[4] or "scan"
assert(overlap == "overlap" or overlap == "no-overlap", "OVERLAP: overlap or no-overlap")
assert(layers == "scan" or layers == "layers", "LAYERS: scan or layers")
local batch = 8

local group = bv.dist.init{backend = "gloo", timeout = 600}
local config = {sharding_strategy = {{".*", strategy}}, optax_name = "scale_by_adam", lr = 1e-4,
                schedule = {}, sharding_overlap = overlap == "overlap"}
local shard = sharding.new(config, group)
local model = bv.models.build("vit", {variant = "B/16", num_classes = 10, image_size = 32,
                                      scan = layers == "scan"})
local params = model:init(0)
local opt = sharding.make_optimizer(shard, json.encode(config), model:param_shapes(),
                                    {total_steps = steps + 1, batch_size = batch, data_size = batch})
params = shard:hold(params)
collectgarbage()
local rng = bv.rng(shard.rank)
local images = bv.randn({batch // shard.world, 32, 32, 3}, rng)
local labels = bv.zeros({batch // shard.world, 10})
labels:narrow(2, 1, 1):fill_(1)

local function step()
  local _, grads = shard:gradients(params, function(p)
    return model:loss_and_grads(p, {image = images, labels = labels}, {loss = "softmax_xent"})
  end)
  opt:update(shard:owned(params), grads, {norms = false})
  shard:sync_params(params)
end

local function peak_mib()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) / 1024 end
  end
end
step()  -- warm-up: the optimizer state exists from here on
collectgarbage()
local f = io.open("/proc/self/clear_refs", "w")  -- resets VmHWM to the current resident size
if f then f:write("5"); f:close() end
local t0 = bv.clock()
for _ = 1, steps do step() end
group:barrier()
local rate = steps / (bv.clock() - t0)
local peaks = shard:gather_strings(string.format("%.0f", peak_mib()))
if shard.rank == 0 then print(string.format("%.3f %s", rate, table.concat(peaks, " "))) end
