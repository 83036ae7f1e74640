-- Every runnable config resolves, its model builds and its optimizer accepts its settings (no
-- data needed): a typo in a config fails here, not an hour into a run.
local T = require "tests.lua.lib.testing"
local config = require "bv.config"
local json = require "bv.json"

local CONFIGS = {"configs/bit_lines.lua", "configs/bit_lines.lua:quick",
                 "configs/bit_lines.lua:rot90=True", "configs/vit_lines.lua",
                 "configs/vit_lines.lua:quick", "configs/vit_i1k.lua", "configs/vit_i1k.lua:aug=strong2",
                 "configs/tfds_lines.lua"}

for _, spec in ipairs(CONFIGS) do
  T.test(spec, function()
    local c = config.load(spec)
    config.validate(c)
    local model_cfg = {}
    for k, v in pairs(c.model) do model_cfg[k] = v end
    model_cfg.num_classes = c.num_classes
    local model = bv.models.build(c.model_name, model_cfg)
    T.truthy(model:param_count() > 0, "parameters")
    local ntrain = spec:find("i1k") and 1281167 or 10000  -- ImageNet's train split, or lines'
    local total = require("bv.chrono").steps("total", c, ntrain, c.input.batch_size)
    T.truthy(total > 0, "total steps")
    local opt = bv.optim.new(json.encode(c), model:param_shapes(),
                             {total_steps = total, batch_size = c.input.batch_size, data_size = ntrain})
    T.eq(opt:count(), 0)
    config.register_pp_ops(spec)  -- the config's own ops, as the data workers get them
    for _, spec_pp in ipairs({c.input.pp, c.evals.val.pp}) do
      T.eq(type(bv.pp.build(spec_pp)), "function")  -- every op exists and binds its arguments
    end
  end)
end

-- The PaliGemma-3B config (no data or tokenizer needed to resolve it): its model is the
-- published size, which the memory note in the config is computed from, and its fsdp strategy
-- spreads parameters and optimizer state evenly: the scanned layer stacks go out a layer at a
-- time (Adafactor treats layers apart). The one tensor it cannot split, the 2 GiB embedding
-- table (Adafactor factors its rows), bounds a rank's share from 8 ranks on.
T.test("configs/paligemma.lua", function()
  local json = require "bv.json"
  local c = config.load("configs/paligemma.lua")
  config.validate(c)
  T.eq(c.optax_name, "big_vision.scale_by_adafactor")
  local model = bv.models.build(c.model_name, c.model)
  T.eq(model:param_count(), 2923335408)
  local sharding = require "bv.sharding"
  local shapes = model:param_shapes()
  local whole = bv.optim.new(json.encode(c), shapes, {total_steps = 10, owned = {}})  -- no memory
  for _, world in ipairs({2, 4, 8}) do
    local shard = sharding.new(c, nil)
    shard.world = world  -- only planning: no process group needed
    shard:plan(shapes, function(n) return whole:frozen(n) end,
               function(n) return whole:rows_independent(n) end)
    local lo, hi, total = math.huge, 0, 0
    for r = 0, world - 1 do
      lo, hi, total = math.min(lo, shard.load[r]), math.max(hi, shard.load[r]), total + shard.load[r]
    end
    if world <= 4 then
      T.truthy(lo > 0.99 * hi, string.format("%d ranks unbalanced: %d .. %d bytes", world, lo, hi))
    else
      T.eq(hi, 257152 * 2048 * 4)  -- llm/embedder/input_embedding alone
      T.truthy(lo > 0.9 * total / world, string.format("%d ranks: %d .. %d bytes", world, lo, hi))
    end
  end
end)

-- Configs are data: the PaliGemma config, tiny variant included, makes no files when loaded
-- (the lines data and the tiny tokenizer are its prepare's, which `bvlua train` runs once);
-- prepare makes what is missing and leaves what exists. Run in an empty directory, since the
-- config's paths are relative to the working directory.
T.test("configs/paligemma.lua: loading makes no files; prepare makes the missing ones", function()
  local root = assert(io.popen("pwd")):read("l")
  local dir = os.tmpname()
  os.remove(dir)
  bv.fs.mkdirs(dir)
  local function sh(code)
    local p = assert(io.popen(string.format("cd '%s' && '%s' -e %q 2>&1", dir,
                                            bv.dist.executable(), code)))
    local out = p:read("a")
    T.truthy(p:close(), out)
    return out
  end
  local function listing() return assert(io.popen("ls -A '" .. dir .. "'")):read("a") end
  local spec = root .. "/configs/paligemma.lua:variant=tiny"
  sh(string.format("bv.config.load(%q); bv.config.load(%q)", spec, root .. "/configs/paligemma.lua"))
  T.eq(listing(), "", "files made by loading")
  -- A few lines of data drawn first (prepare would draw the whole set), then prepare: the
  -- tokenizer, with the vocabulary the tiny model is built for.
  sh(string.format("assert(os.execute(%q))",
                   string.format("'%s' run '%s/scripts/make_lines.lua' data/lines --train 8 "
                                 .. "--val 4 --test 1 >/dev/null", bv.dist.executable(), root)))
  local code = string.format("local c = bv.config.load(%q); assert(bv.config.prepare(%q, c)); "
    .. "print(c.model.llm.vocab_size, bv.text.tokenizer(c.evals['val/vqa'].tokenizer).vocab_size)",
    spec, spec)
  local out = sh(code)
  T.truthy(out:find("training the tiny tokenizer", 1, true), out)
  T.truthy(not out:find("drawing", 1, true), out)
  T.truthy(out:find("43\t43\n", 1, true), out)
  T.truthy(bv.fs.exists(dir .. "/data/lines/tiny_sp.model"), "tokenizer made")
  out = sh(code)
  T.truthy(not out:find("training", 1, true), "a second prepare does nothing: " .. out)
  os.execute("rm -rf '" .. dir .. "'")
end)

T.run()
