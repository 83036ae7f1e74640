-- A SigLIP So400m/14 image encoder fine-tuned as a 3-way classifier on the 128 lines examples
-- of big_vision's GPU tutorial (its lines_siglip.py, with the tutorial's settings).
--
--   bvlua train configs/lines/siglip.lua:init=ckpts/webli_en_so400m_224_57633886.npz \
--     --workdir runs/siglip                                      # a GPU (10 GB is enough)
--   bvlua train configs/lines/siglip.lua:runlocal,init=small.npz --workdir runs/sl   # the CPU
--
-- init: a SigLIP two-tower checkpoint; its image tower (the `img/` subtree) initialises the ViT,
-- whose head starts from zeros (dont_load, as the tutorial's). runlocal: a tiny ViT ("mu/4",
-- scanned, MAP head) at 32 px for a few steps, fine-tuned from `init`, which must then hold such
-- a ViT under img/ (tests/cli/lines_configs_test.sh writes one). data: the data directory
-- (default data/lines, drawn the first time). Anything else with --config.KEY=VALUE.
-- The tutorial measured 96.6% test accuracy without augmentations after a sweep.
local config = require "bv.config"
local lines = require "bv.lines"

local function get_config(arg)
  arg = config.parse_arg(arg, {init = "webli_en_so400m_224_57633886.npz", runlocal = false,
                               data = lines.DIR})
  local res = arg.runlocal and 32 or 224
  local pp = string.format("decode|resize(%d)|value_range(-1, 1)|", res)
             .. 'onehot(3, key="label", key_result="labels")|keep("image", "labels")'
  local c = {}
  c.seed = 0
  c.input = {data = lines.data(arg.data, "train", 128), batch_size = 32,
             shuffle_buffer_size = 1000, pp = pp}
  c.num_classes = 3
  c.loss = "softmax_xent"
  c.log_training_steps = 1
  c.total_epochs = 15
  c.optax_name = "big_vision.scale_by_adafactor"
  c.lr = 1e-5
  c.wd = 3e-7
  c.grad_clip_norm = 1.0
  c.schedule = {decay_type = "cosine", warmup_percent = 0.1}
  c.model_name = "vit"
  c.model = {variant = "So400m/14", pool_type = "map", head_zeroinit = true, scan = true}
  c.model_init = arg.init .. ":img"
  c.model_load = {dont_load = {"head/kernel", "head/bias"}}
  c.ckpt_percent = 0.25
  c.evals = {["eval/acc"] = {type = "classification", loss_name = "softmax_xent",
                             data = lines.data(arg.data, "val"), pp = pp, log_percent = 1 / 8,
                             skip_first = true, cache = "final_data"}}

  if arg.runlocal then
    c.input.batch_size = 8
    c.total_epochs = nil
    c.total_steps = 8
    c.lr = 1e-3
    c.model.variant = "mu/4"
    c.evals["eval/acc"].data = lines.data(arg.data, "val", 32)
  end
  return c
end

return {get_config = get_config, prepare = lines.prepare}
