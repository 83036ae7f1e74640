-- big_vision's "better plain ViT baselines" (configs/vit_i1k.py): ViT-S/16 on ImageNet-1k in 90
-- epochs, for an ImageNet image folder (ROOT/train/<class>/*.JPEG, ROOT/val/<class>/*.JPEG).
--
--   bvlua train configs/vit_i1k.lua:root=/data/imagenet --workdir runs/vit_s16_i1k
--
-- big_vision reports 76.5% top-1 after 90 epochs (about a day on an 8-GPU machine). Arguments:
-- root (the image folder), aug (light1, light2 (default), medium1, medium2, strong1, strong2:
-- RandAugment and mixup strength as in big_vision), runlocal (tiny batches, a few steps).
local config = require "bv.config"

-- big_vision's augmentation presets: RandAugment(layers, magnitude) and the mixup p.
local AUG = {
  none = {nil, 0.0}, light1 = {"randaug(2, 0)", 0.0}, light2 = {"randaug(2, 10)", 0.2},
  medium1 = {"randaug(2, 15)", 0.2}, medium2 = {"randaug(2, 15)", 0.5},
  strong1 = {"randaug(2, 20)", 0.5}, strong2 = {"randaug(2, 20)", 0.8},
}

local LABELS = 'onehot(1000, key="label", key_result="labels")|keep("image", "labels")'

return function(arg)
  arg = config.parse_arg(arg, {{"root", "data/imagenet"}, {"aug", "light2"}, {"runlocal", false}})
  local aug = AUG[arg.aug] or error("vit_i1k: unknown aug '" .. arg.aug .. "'", 0)
  local train_pp = "decode_jpeg_and_inception_crop(224)|flip_lr|"
    .. (aug[1] and (aug[1] .. "|") or "") .. "value_range(-1, 1)|" .. LABELS
  local c = {
    seed = 0,
    total_epochs = 90,
    num_classes = 1000,
    loss = "sigmoid_xent",
    init_head_bias = -6.9,  -- log(1/1000): the sigmoid loss starts near the prior
    input = {data = {name = "bv:imagefolder", root = arg.root .. "/train"}, batch_size = 1024,
             shuffle_buffer_size = 250000, pp = train_pp},
    model_name = "vit",
    model = {variant = "S/16", rep_size = true, pool_type = "gap", posemb = "sincos2d"},
    optax_name = "scale_by_adam",
    optax = {mu_dtype = "bfloat16"},
    grad_clip_norm = 1.0,
    lr = 0.001,
    wd = 0.0001,
    schedule = {warmup_steps = 10000, decay_type = "cosine"},
    mixup = {p = aug[2]},
    log_training_steps = 50,
    ckpt_steps = 1000,
    evals = {val = {type = "classification",
                    data = {name = "bv:imagefolder", root = arg.root .. "/val"},
                    pp = "decode|resize_small(256)|central_crop(224)|value_range(-1, 1)|" .. LABELS,
                    loss_name = "sigmoid_xent", log_steps = 2500}},
  }
  if arg.runlocal then
    c.total_epochs, c.total_steps = nil, 4
    c.input.batch_size, c.input.shuffle_buffer_size = 8, 10
    c.schedule.warmup_steps = 1
    c.log_training_steps, c.evals.val.log_steps = 2, 4
  end
  return c
end
