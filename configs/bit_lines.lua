-- BiT ResNet-26 trained from scratch on the "lines" data set of big_vision's GPU tutorial:
-- count the crossings (0, 1 or 2) of two drawn polylines.
--
--   bvlua run scripts/make_lines.lua data/lines                      # the data (~30 s)
--   bvlua train configs/bit_lines.lua --workdir runs/bit_lines
--   bvlua train configs/bit_lines.lua:quick --workdir runs/quick     # a few minutes on CPU
--
-- Arguments (all optional): flip (random left-right and up-down flips; crossings don't
-- change), crop (random crops of the image resized a little larger), res (the image size,
-- default 64), quick (a short run for a CPU: 400 steps of 32, a half-width ResNet-26),
-- runlocal (tiny batch, a few steps: just checks that everything runs).
-- Override anything with --config.KEY=VALUE, e.g. --config.lr=0.01 or --config.model.depth=50.
-- The validation prec@1 (val/prec@1 in runs/.../big_vision_metrics.txt) climbs above the
-- majority class (label 1, about 0.52): measured 0.72 after the quick run's 400 steps.
--
-- Data: data/lines/{train,val}.jsonl, one {"image": "<file name>", "label": <0..2>} per line,
-- image files under data/lines/.
local config = require "bv.config"

-- A pp op defined right here, as configs may: flip upside down with probability 0.5. Data
-- workers load this file too, so the op exists there.
bv.pp.register("flip_ud", bv.pp.inkeyoutkey(function()
  return function(img, rng)
    if rng:uniform() < 0.5 then return img:flip(1) end
    return img
  end
end), "flip_ud(): flips the image upside down with probability 0.5 (defined in bit_lines.lua)")

local RES = 64

local function train_pp(arg)
  local RES = arg.res
  local ops = {"decode"}
  if arg.flip then ops[#ops + 1] = "flip_lr|flip_ud" end
  if arg.crop then
    ops[#ops + 1] = string.format("resize(%d, method='area')", RES + RES // 8)
    ops[#ops + 1] = string.format("random_crop(%d)", RES)
  else
    ops[#ops + 1] = string.format("resize(%d, method='area')", RES)
  end
  ops[#ops + 1] = "value_range(-1, 1)"
  ops[#ops + 1] = 'onehot(3, key="label", key_result="labels")'
  ops[#ops + 1] = 'keep("image", "labels")'
  return table.concat(ops, "|")
end

-- Evaluation sees whole images: no flips, no random crops.
local function eval_pp(res)
  -- 'area' keeps the thin lines that bilinear sampling would step over when shrinking 224 -> 64.
  return string.format("decode|resize(%d, method='area')|value_range(-1, 1)|"
    .. 'onehot(3, key="label", key_result="labels")|keep("image", "labels")', res)
end

local function lines_data(split)
  return {
    name = "bv:jsonl",
    fname = "data/lines/" .. split .. ".jsonl",
    fopen_keys = {image = "data/lines"},
  }
end

local function get_config(arg)
  arg = config.parse_arg(arg, {{"flip", true}, {"crop", true}, {"res", RES}, {"quick", false},
                               {"runlocal", false}})
  if arg.quick then arg.crop = false end  -- measured: better in a short run
  local c = {}
  c.seed = 0
  c.total_epochs = 20
  c.num_classes = 3
  c.loss = "softmax_xent"

  c.input = {
    data = lines_data("train"),
    batch_size = 64,
    shuffle_buffer_size = 1000,
    pp = train_pp(arg),
  }

  c.model_name = "bit"
  c.model = {depth = 26, width = 1}

  c.optax_name = "big_vision.momentum_hp"
  c.lr = 0.03
  c.wd = 1e-5
  c.schedule = {decay_type = "cosine", warmup_steps = 100}
  c.grad_clip_norm = 1.0

  c.log_training_steps = 50
  c.ckpt_steps = 1000

  c.evals = {
    val = {
      type = "classification",
      data = lines_data("val"),
      pp = eval_pp(arg.res),
      log_steps = 100,
      loss_name = "softmax_xent",
    },
  }

  if arg.quick then
    c.total_epochs = nil
    c.total_steps = 400
    c.input.batch_size = 32
    c.model.width = 0.5
    c.schedule.warmup_steps = 20
    c.lr = 0.1
    c.log_training_steps = 20
    c.ckpt_steps = 100
    c.evals.val.log_steps = 100
  end
  -- big_vision's quick-test idiom: shrink everything that costs time.
  if arg.runlocal then
    c.total_epochs = nil
    c.total_steps = 4
    c.input.batch_size = 8
    c.input.shuffle_buffer_size = 10
    c.model.width = 0.5
    c.schedule.warmup_steps = 1
    c.log_training_steps = 2
    c.evals.val.log_steps = 4
  end
  return c
end

return get_config
