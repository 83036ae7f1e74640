-- A small ViT trained from scratch on the "lines" data set (see bit_lines.lua for the task).
--
--   bvlua run scripts/make_lines.lua data/lines
--   bvlua train configs/vit_lines.lua --workdir runs/vit_lines
--   bvlua train configs/vit_lines.lua:quick --workdir runs/vit_lines_quick   # minutes on CPU
--
-- Arguments: res (image size, default 64), quick (400 steps of 32), runlocal (a few steps).
local config = require "bv.config"
local lines = require "bv.lines"

local function pp(res, train)
  local ops = {"decode"}
  if train then ops[#ops + 1] = "flip_lr" end
  ops[#ops + 1] = string.format("resize(%d, method='area')", res)
  ops[#ops + 1] = 'value_range(-1, 1)|onehot(3, key="label", key_result="labels")|keep("image", "labels")'
  return table.concat(ops, "|")
end

local function lines_data(split)
  return {name = "bv:jsonl", fname = "data/lines/" .. split .. ".jsonl",
          fopen_keys = {image = "data/lines"}}
end

local function get_config(arg)
  arg = config.parse_arg(arg, {{"res", 64}, {"quick", false}, {"runlocal", false}})
  local c = {
    seed = 0,
    total_epochs = 30,
    num_classes = 3,
    loss = "softmax_xent",
    input = {data = lines_data("train"), batch_size = 128, shuffle_buffer_size = 1000,
             pp = pp(arg.res, true)},
    model_name = "vit",
    model = {variant = "Ti/8", pool_type = "gap", posemb = "sincos2d"},
    optax_name = "scale_by_adam",
    lr = 0.001,
    wd = 0.0001,
    schedule = {decay_type = "cosine", warmup_percent = 0.05},
    grad_clip_norm = 1.0,
    log_training_steps = 50,
    ckpt_steps = 500,
    evals = {val = {type = "classification", data = lines_data("val"), pp = pp(arg.res, false),
                    log_steps = 500, loss_name = "softmax_xent"}},
  }
  if arg.quick then
    c.total_epochs, c.total_steps = nil, 400
    c.input.batch_size = 32
    c.log_training_steps, c.ckpt_steps, c.evals.val.log_steps = 20, 100, 100
  end
  if arg.runlocal then
    c.total_epochs, c.total_steps = nil, 4
    c.input.batch_size, c.input.shuffle_buffer_size = 8, 10
    c.log_training_steps, c.evals.val.log_steps = 2, 4
  end
  return c
end

return {get_config = get_config, prepare = lines.prepare}
