-- A SigLIP So400m/14 image encoder fine-tuned as a 3-way classifier on the 128 lines examples
-- of big_vision's GPU tutorial (its lines_siglip.py, with the tutorial's settings).
--
--   bvlua train configs/lines/siglip.lua:init=ckpts/webli_en_so400m_224_57633886.npz \
--     --workdir runs/siglip                                      # a GPU (10 GB is enough)
--   bvlua train configs/lines/siglip.lua:runlocal --workdir runs/sl   # the CPU, nothing to fetch
--
-- init: a SigLIP two-tower checkpoint; its image tower (the `img/` subtree) initialises the ViT,
-- whose head starts from zeros (dont_load, as the tutorial's). The tutorial's is big_vision's
-- "SigLIP So400m/14 224", gs://big_vision/siglip/webli_en_so400m_224_57633886.npz.
-- runlocal: a tiny ViT ("mu/4", scanned, MAP head) at 32 px for a few steps. Without init=, it
-- starts from a RANDOMLY INITIALISED stand-in two-tower checkpoint that prepare writes once
-- into the data directory (siglip_standin_random.npz: a mu/4 ViT under img/, a mu text tower
-- under txt/, t and b, big_vision's layout), so it runs with no download; with init=, from a
-- checkpoint holding such a ViT under img/. data: the data directory (default data/lines,
-- drawn the first time). Anything else with --config.KEY=VALUE.
-- The tutorial measured 96.6% test accuracy without augmentations after a sweep.
local config = require "bv.config"
local lines = require "bv.lines"
local log = require "bv.log"

-- big_vision's "SigLIP So400m/14 224" (models/proj/image_text/two_towers.py VANITY_NAMES).
local SO400M = "webli_en_so400m_224_57633886.npz"
local SO400M_URL = "gs://big_vision/siglip/" .. SO400M
-- runlocal's stand-in for it, written by prepare into the data directory.
local STANDIN = "siglip_standin_random.npz"
local RUNLOCAL_RES = 32

local function get_config(arg)
  arg = config.parse_arg(arg, {init = {nil, "string"}, runlocal = false, data = lines.DIR})
  local res = arg.runlocal and RUNLOCAL_RES or 224
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
  c.model_init = (arg.init or SO400M) .. ":img"
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
    if not arg.init then c.model_init = arg.data .. "/" .. STANDIN .. ":img" end
  end
  return c
end

local function this_file() return config.tree_path("configs/lines/siglip.lua") end

-- Writes a RANDOMLY INITIALISED SigLIP two-tower checkpoint at `path`, laid out as big_vision's
-- (img/: the ViT of `model` at RUNLOCAL_RES px without a head, out_dim's None; txt/: a "mu"
-- text transformer with a small vocabulary; t and b as the SigLIP demo sets them).
local function write_standin(path, model)
  local img = {variant = model.variant, pool_type = model.pool_type, scan = model.scan,
               image_size = RUNLOCAL_RES}
  local towers = bv.models.build("proj.image_text.two_towers", {
    image = img, text = {variant = "mu", vocab_size = 256}, out_dim = {bv.null, 32},
    temperature_init = 10.0, bias_init = -10.0})
  bv.ckpt.save_npz(path, towers:init(0))
end

-- The init checkpoint's file, whether it is runlocal's stand-in, and the error when a real one
-- is missing (naming where big_vision publishes it).
local function init_plan(c)
  local init = type(c.model_init) == "string" and c.model_init:match("^(.*%.npz):img$")
  local standin = init and init:sub(-#STANDIN - 1) == "/" .. STANDIN
  if init and not standin and not bv.fs.exists(init) then
    return init, false, string.format("%s: no SigLIP checkpoint at %s%s. Download big_vision's "
      .. "SigLIP So400m/14 224 (%s, also https://storage.googleapis.com/big_vision/siglip/%s) "
      .. "and give its path: %s:init=PATH/%s. On a CPU, %s:runlocal trains a tiny ViT from a "
      .. "randomly initialised stand-in, with nothing to download.", this_file(), init,
      init:sub(1, 1) == "/" and "" or " (relative to the current directory)", SO400M_URL,
      SO400M, this_file(), SO400M, this_file())
  end
  return init, standin, nil
end

-- For --dry-run and sweep: what prepare would refuse (a missing checkpoint) or write (the
-- stand-in).
local function check(c)
  local init, standin, missing = init_plan(c)
  if missing then return {"model_init: " .. missing}, {}, {init} end
  if standin and not bv.fs.exists(init) then
    return {}, {string.format("model_init: %s is not there yet: bvlua train writes a RANDOMLY "
      .. "INITIALISED stand-in there first (the config's prepare)", init)}, {init}
  end
  return {}, {}, {}
end

-- Before any data is read (`bvlua train` runs it once): a missing init checkpoint is an error
-- naming where big_vision publishes it; the data set is drawn if missing; runlocal's stand-in
-- is written if missing.
local function prepare(c)
  local init, standin, missing = init_plan(c)
  if missing then error(missing, 0) end
  lines.prepare(c)
  if not standin then return end
  if bv.fs.exists(init) then
    log.note("Starting from %s, a RANDOMLY INITIALISED stand-in for the SigLIP checkpoint (NOT "
      .. "pretrained weights)", init)
    return
  end
  bv.fs.mkdirs(init:match("^(.*)/[^/]*$") or ".")
  write_standin(init, c.model)
  log.note("Wrote %s: a RANDOMLY INITIALISED stand-in for the SigLIP checkpoint (NOT pretrained "
    .. "weights), so that runlocal runs with no download. Delete it to write it again; "
    .. "init=PATH starts from a real one.", init)
end

return {get_config = get_config, prepare = prepare, check = check}
