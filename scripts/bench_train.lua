-- The training-step benchmark's bvlua side (scripts/bench runs it next to PyTorch).
--   bvlua run scripts/bench_train.lua MODEL RES BATCH STEPS [MODE]
--     -> prints "steps/s minor-page-faults-per-step kernel-share-of-cpu-time"
-- MODEL: bit26 (BiT-R26x1), vits16 (ViT-S/16), vitb16 (ViT-B/16), vitti16 (ViT-Ti/16). Random
-- data. MODE: train (a step with SGD, float32; the default), bf16 (the same step under
-- autocast to bfloat16, as config.autocast = "bfloat16"), eval (the forward pass alone, no
-- gradients: an evaluator's batch). BENCH_DEVICE=cuda (scripts/gpu_check) runs it on the GPU:
-- parameters, optimizer state and batch there, the clock stopped once the GPU is done.
local name, res, batch, steps = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local mode = arg[5] or "train"
local json = require "bv.json"

local MODELS = {
  bit26 = {"bit", {depth = 26, width = 1, num_classes = 1000}},
  vits16 = {"vit", {variant = "S/16", num_classes = 1000, image_size = res}},
  vitb16 = {"vit", {variant = "B/16", num_classes = 1000, image_size = res}},
  vitti16 = {"vit", {variant = "Ti/16", num_classes = 1000, image_size = res}},
}
local spec = MODELS[name] or error("unknown model " .. tostring(name))
assert(mode == "train" or mode == "bf16" or mode == "eval", "MODE: train, bf16 or eval")
local device = os.getenv("BENCH_DEVICE") or "cpu"
if device == "fake" then device = bv._fake_device() end  -- scripts/gpu_check --fake
local model = bv.models.build(spec[1], spec[2])
local params = model:init(0)
for name, t in pairs(params) do params[name] = t:to(device) end
local opt = bv.optim.new(json.encode({optax_name = "big_vision.sgd", lr = 0.01, schedule = {}}),
                         model:param_shapes(), {total_steps = steps + 1, batch_size = batch,
                                                data_size = batch, device = device})
local rng = bv.rng(0)
local images = bv.randn({batch, res, res, 3}, rng)
local labels = bv.zeros({batch, 1000})
for i = 1, batch do labels[{i, rng:integer(1, 1000)}] = 1 end
images, labels = images:to(device), labels:to(device)

local function step()
  if mode == "eval" then
    model:apply(params, images, {train = false})
    return
  end
  local _, grads = model:loss_and_grads(params, {image = images, labels = labels},
      {loss = "softmax_xent", autocast = mode == "bf16" and "bfloat16" or nil})
  opt:update(params, grads, {norms = false})  -- as the trainer between log steps
end
step()  -- warm-up
-- The host queues a GPU's kernels and runs ahead: the clock stops when a value of the last
-- step is back on the host (one stream, so all the steps before it are done too).
local _, any = next(params)
local function finish() any:sum():item() end
dofile(arg[0]:gsub("[^/]*$", "") .. "bench_timing.lua")(step, steps, finish)
