-- BiT-style ResNet on the tiny "lines" dataset (3 classes of drawn lines), after big_vision's
-- GPU tutorial. Resolve and inspect the config with:
--
--   bvlua train configs/bit_lines.lua:flip=true,crop=false --workdir runs/bit --dry-run
--
-- Arguments (all optional): flip (random left-right flips), crop (random 32px crops of the
-- image resized to 36px; off: resize to 32px), runlocal (tiny batch and one epoch, for a
-- quick check on a laptop). Override anything with --config.KEY=VALUE, e.g.
-- --config.lr=0.01 or --config.model.depth=50.
--
-- The trainer comes later: today `bvlua train` only resolves this config and writes
-- DIR/config.json (exit code 3 without --dry-run).
--
-- Data: data/lines/{train,val}.jsonl, one {"image": "<file name>", "label": <0..2>} per line,
-- image files under data/lines/.
local config = require "bv.config"

local RES = 32

local function train_pp(arg)
  local ops = {"decode"}
  if arg.flip then ops[#ops + 1] = "flip_lr" end
  if arg.crop then
    ops[#ops + 1] = string.format("resize(%d)", RES + 4)
    ops[#ops + 1] = string.format("random_crop(%d)", RES)
  else
    ops[#ops + 1] = string.format("resize(%d)", RES)
  end
  ops[#ops + 1] = "value_range(-1, 1)"
  ops[#ops + 1] = 'onehot(3, key="label", key_result="labels")'
  ops[#ops + 1] = 'keep("image", "labels")'
  return table.concat(ops, "|")
end

-- Evaluation sees whole images: no flips, no random crops.
local EVAL_PP = string.format('decode|resize(%d)|value_range(-1, 1)|'
  .. 'onehot(3, key="label", key_result="labels")|keep("image", "labels")', RES)

local function lines_data(split)
  return {
    name = "bv:jsonl",
    fname = "data/lines/" .. split .. ".jsonl",
    fopen_keys = {image = "data/lines"},
  }
end

local function get_config(arg)
  arg = config.parse_arg(arg, {{"flip", true}, {"crop", true}, {"runlocal", false}})
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
      pp = EVAL_PP,
      log_steps = 100,
      loss_name = "softmax_xent",
    },
  }

  -- big_vision's quick-test idiom: shrink everything that costs time.
  if arg.runlocal then
    c.total_epochs = 1
    c.input.batch_size = 8
    c.input.shuffle_buffer_size = 10
  end
  return c
end

return get_config
