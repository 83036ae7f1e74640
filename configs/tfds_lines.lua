-- A small ViT trained on a TFDS dataset read natively, with big_vision's data keys:
-- input.data = {name = "NAME[/CONFIG][:VERSION]", split = "...", data_dir = ...}, as in
-- big_vision's configs (`config.input.data = dict(name='imagenet2012', split='train[:99%]')`).
--
--   bvlua train configs/tfds_lines.lua --workdir runs/tfds     # the committed fixture, seconds
--   bvlua train configs/tfds_lines.lua:name=imagenet2012,data_dir=~/tensorflow_datasets ...
--
-- The default is the fixture tests/data/tfds/lines_tfds (60 16x16 PNGs of the lines task, 3
-- classes, written by the real tensorflow-datasets: scripts/make_tfds_fixture.py). It trains on
-- train[:80%] and evaluates on train[80%:]+validation (another split expression) and on test.
-- Arguments: name, data_dir (default: the fixture's directory; "" for TFDS's own default,
-- $TFDS_DATA_DIR or ~/tensorflow_datasets), res (the image size, default 16), steps (default 20).
local config = require "bv.config"

local function get_config(arg)
  arg = config.parse_arg(arg, {name = "lines_tfds", data_dir = config.tree_path("tests/data/tfds"),
                               res = 16, steps = 20})
  local function data(split)
    return {name = arg.name, split = split, data_dir = arg.data_dir ~= "" and arg.data_dir or nil}
  end
  local pp = string.format('decode|resize(%d)|value_range(-1, 1)|', arg.res)
             .. 'onehot(3, key="label", key_result="labels")|keep("image", "labels")'
  local function eval(split)
    return {type = "classification", loss_name = "softmax_xent", data = data(split), pp = pp,
            log_percent = 0.5}
  end
  return {
    seed = 0,
    input = {data = data("train[:80%]"), batch_size = 8, shuffle_buffer_size = 100, pp = pp},
    total_steps = arg.steps,
    num_classes = 3,
    loss = "softmax_xent",
    model_name = "vit",
    model = {variant = "mu/4", pool_type = "gap", posemb = "sincos2d", image_size = arg.res},
    optax_name = "scale_by_adam",
    lr = 1e-3,
    wd = 1e-4,
    schedule = {decay_type = "cosine", warmup_steps = 2},
    log_training_steps = 5,
    ckpt_steps = arg.steps,
    evals = {val = eval("train[80%:]+validation"), test = eval("test")},
  }
end

return get_config
