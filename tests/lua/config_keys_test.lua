-- bv.config_keys: declared keys can be overridden when the config lacks them (converted to the
-- declared type, durations replacing each other), undeclared ones are an error or a warning
-- with the closest declared name, None (bv.null) is absent for the trainer and freezes in a
-- schedule, every key the trainers read is declared, and docs/config_keys.md is up to date.
local T = require "tests.lua.lib.testing"
local config = require "bv.config"
local config_keys = require "bv.config_keys"
local json = require "bv.json"
local null = bv.null

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local ROOT = HERE .. "/../.."

-- Overrides ---------------------------------------------------------------------------------

local function epochs_only()
  return {total_epochs = 20, lr = 0.1, optax_name = "big_vision.sgd", model_name = "bit",
          model = {depth = 26}, input = {batch_size = 8, data = {name = "bv:jsonl", fname = "x"}},
          evals = {val = {type = "classification", loss_name = "softmax_xent",
                          data = {name = "bv:jsonl", fname = "val.jsonl"}}}}
end

T.test("total_steps on a config with total_epochs only: set, and total_epochs goes", function()
  local cfg = epochs_only()
  local v, note = config.override(cfg, "total_steps", "40")
  T.eq(v, 40)
  T.eq(math.type(cfg.total_steps), "integer")
  T.eq(cfg.total_epochs, nil)
  T.eq(note, "--config.total_steps replaces total_epochs=20 (only one total_* may be set)")
  -- An existing duration replaces the others too; setting the same one says nothing.
  _, note = config.override(cfg, "total_steps", "50")
  T.eq(note, nil)
  _, note = config.override(cfg, "total_examples", "640")
  T.eq(cfg.total_steps, nil)
  T.truthy(note and note:find("replaces total_steps=50", 1, true), note)
end)

T.test("model_init from the command line on a config without one", function()
  local cfg = epochs_only()
  config.override(cfg, "model_init", "pt_224")
  T.eq(cfg.model_init, "pt_224")
  -- An existing value keeps its type (as big_vision's ConfigDict); an absent one of declared
  -- type string|table takes a literal table as a table.
  config.override(cfg, "model_init", "{'img': 'a.npz'}")
  T.eq(cfg.model_init, "{'img': 'a.npz'}")
  cfg = epochs_only()
  config.override(cfg, "model_init", "{'img': 'a.npz'}")
  T.eq(cfg.model_init, {img = "a.npz"})
end)

T.test("a new nested key: evals.NAME.data.stop, declared by the evaluator's source", function()
  local cfg = epochs_only()
  config.override(cfg, "evals.val.data.stop", "8")
  T.eq(cfg.evals.val.data.stop, 8)
  config.override(cfg, "evals.val.outfile", "{workdir}/x.json")
  T.eq(cfg.evals.val.outfile, "{workdir}/x.json")
end)

T.test("undeclared absent keys: an error naming the closest declared key", function()
  local cfg = epochs_only()
  T.raises(function() config.override(cfg, "shedule", "{}") end,
    'unknown config key "shedule" (--config.shedule) (did you mean \'schedule\'?)')
  T.raises(function() config.override(cfg, "evals.val.data.stp", "8") end,
    'unknown config key "evals.val.data.stp" (--config.evals.val.data.stp) (did you mean \'stop\'?)')
  T.raises(function() config.override(cfg, "optax.momentum", "0.9") end,
    'unknown config key "optax.momentum" (--config.optax.momentum)')
  T.raises(function() config.override(cfg, "model.dpth", "50") end, "did you mean 'depth'?")
  T.eq(cfg.shedule, nil)
  T.eq(cfg.optax, nil, "nothing made on the way to an error")
end)

T.test("declared types convert and check the text", function()
  local cfg = epochs_only()
  T.raises(function() config.override(cfg, "total_steps", "x") end,
    '--config.total_steps: expected an integer, got "x"')
  T.raises(function() config.override(cfg, "grad_clip_norm", "big") end,
    '--config.grad_clip_norm: expected a number, got "big"')
  T.raises(function() config.override(cfg, "input.cache_raw", "maybe") end,
    '--config.input.cache_raw: expected a boolean')
  config.override(cfg, "grad_clip_norm", "1")
  T.eq(math.type(cfg.grad_clip_norm), "float")
  cfg.model.depth = nil
  config.override(cfg, "model.depth", "[2, 2, 2, 2]")  -- bit's int|list
  T.eq(cfg.model.depth, {2, 2, 2, 2})
  config.override(cfg, "mixup", "{'p': 0.2}")
  T.eq(cfg.mixup, {p = 0.2})
end)

T.test("None: sets bv.null; a null key takes its declared type", function()
  local cfg = epochs_only()
  cfg.model_init = "pt_224"
  config.override(cfg, "model_init", "None")
  T.truthy(cfg.model_init == null)
  config.override(cfg, "model_init", "pt_448")
  T.eq(cfg.model_init, "pt_448")
  cfg.grad_clip_norm = null
  config.override(cfg, "grad_clip_norm", "2")
  T.eq(cfg.grad_clip_norm, 2.0)
  cfg.total_steps = null  -- a None duration is not replaced; setting it replaces the others
  local _, note = config.override(cfg, "total_steps", "3")
  T.truthy(note and note:find("total_epochs=20", 1, true), note)
end)

-- Unknown keys ------------------------------------------------------------------------------

T.test("unknown keys of a resolved config: warnings with the closest declared key", function()
  local cfg = epochs_only()
  cfg.shedule, cfg.total_epoch, cfg.lr_mult = {}, 1, {}
  cfg.model.wdth = 2
  cfg.evals.val.log_step = 10
  cfg.schedule = {{"head/.*", null}, {".*", {decay_type = "cosine", warmup_step = 2}}}
  T.eq(config_keys.unknown(cfg), {
    "config key 'evals.val.log_step' is not one that evaluator:classification reads "
      .. "(did you mean 'log_steps'?)",
    "config key 'lr_mult' is not one that trainer:classification reads (did you mean "
      .. "'lr_mults'?)",
    "config key 'model.wdth' is not one that model:bit reads (did you mean 'width'?)",
    "config key 'schedule.2.warmup_step' is not one that schedule:cosine reads (did you mean "
      .. "'warmup_steps'?)",
    "config key 'shedule' is not one that trainer:classification reads (did you mean "
      .. "'schedule'?)",
    "config key 'total_epoch' is not one that trainer:classification reads (did you mean "
      .. "'total_epochs'?)",
  })
  T.eq(config_keys.unknown(epochs_only()), {})
end)

T.test("the repository's configs read no undeclared key", function()
  for _, spec in ipairs({"configs/bit_lines.lua", "configs/vit_lines.lua", "configs/vit_i1k.lua",
                         "configs/paligemma.lua", "configs/lines/resnet.lua",
                         "configs/lines/siglip.lua", "configs/lines/paligemma.lua"}) do
    T.eq(config_keys.unknown(config.load(ROOT .. "/" .. spec)), {}, spec)
  end
end)

T.test("bvlua train warns about unknown keys at its start", function()
  local train = require "bv.commands.train"
  local err, real_err = {}, io.stderr
  io.stderr = {write = function(self, ...)
    for _, s in ipairs({...}) do err[#err + 1] = s end
    return self
  end, flush = function(self) return self end}
  local real_out = io.stdout
  io.stdout = {write = function(self) return self end, flush = function(self) return self end}
  local ok, code = pcall(train.main, {ROOT .. "/configs/bit_lines.lua", "--dry-run",
                                      "--config.total_steps=5"})
  io.stderr, io.stdout = real_err, real_out
  T.truthy(ok, code)
  -- The first line; --dry-run's own notes and its verdict follow.
  T.eq(table.concat(err):match("^[^\n]*\n"), "NOTE: --config.total_steps replaces "
    .. "total_epochs=20 (only one total_* may be set)\n")
end)

-- None --------------------------------------------------------------------------------------

T.test("without_nulls: map entries of None go, list items stay", function()
  local cfg = {model_init = null, model = {bias_init = null, out_dim = {null, 8}},
               schedule = {{"img/.*", null}, {".*", {}}}, lr = 0.1}
  local out = config_keys.without_nulls(cfg)
  T.eq(out.model_init, nil)
  T.eq(out.model.bias_init, nil)
  T.truthy(out.model.out_dim[1] == null)
  T.truthy(out.schedule[1][2] == null)
  T.truthy(cfg.model_init == null, "the config itself is unchanged")
  T.eq(json.encode(config_keys.without_nulls({schedule = null})), '{"schedule":null}',
       "a schedule of None stays, for the optimizer to refuse by name")
end)

-- The trainers on a tiny data set -------------------------------------------------------------

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp .. "/data")

local function make_split(name, n, seed)
  local rng, lines = bv.rng(seed), {}
  for i = 1, n do
    local label = (i - 1) % 3
    local img = bv.rand({16, 16, 3}, rng) * 120
    img[{{}, {}, label + 1}] = img[{{}, {}, label + 1}] + 120
    local file = string.format("%s_%03d.png", name, i)
    bv.image.write_png(img:to("uint8"), tmp .. "/data/" .. file)
    lines[i] = json.encode({image = file, label = label})
  end
  bv.fs.write_file(tmp .. "/data/" .. name .. ".jsonl", table.concat(lines, "\n"))
end
make_split("train", 24, 1)
make_split("val", 12, 2)

local PP = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")|'
  .. 'keep("image", "labels")'

local function tiny(steps)
  local function data(split)
    return {name = "bv:jsonl", fname = tmp .. "/data/" .. split .. ".jsonl",
            fopen_keys = {image = tmp .. "/data"}}
  end
  return {
    seed = 0, total_steps = steps, num_classes = 3, loss = "softmax_xent",
    input = {data = data("train"), batch_size = 8, shuffle_buffer_size = 8, pp = PP},
    model_name = "vit", model = {variant = "mu/8", depth = 1, head_zeroinit = false},
    optax_name = "scale_by_adam", lr = 0.01, wd = 1e-4, grad_clip_norm = 1.0,
    schedule = {decay_type = "cosine", warmup_steps = 1},
    log_training_steps = 1,
    evals = {val = {type = "classification", data = data("val"), pp = PP, log_steps = steps,
                    loss_name = "softmax_xent"}},
  }
end

local function quietly(fn)
  local real_out = io.stdout
  io.stdout = {write = function(self) return self end, flush = function(self) return self end}
  local ok, result = pcall(fn)
  io.stdout = real_out
  require("bv.log").setup()
  if not ok then error(result, 0) end
  return result
end

T.test("a schedule entry of None freezes what it matches", function()
  local trainer = require "bv.trainers.classification"
  local cfg = tiny(2)
  cfg.schedule = {{"head/.*", null}, {".*", {decay_type = "cosine", warmup_steps = 1}}}
  local work = tmp .. "/frozen"
  local out = quietly(function() return trainer(config_keys.without_nulls(cfg), work, {}) end)
  local model_cfg = {variant = "mu/8", depth = 1, head_zeroinit = false, num_classes = 3,
                     image_size = {16, 16}}
  local init = bv.models.build("vit", model_cfg):init(0)
  T.eq((out.params["head/kernel"] - init["head/kernel"]):abs():max():item(), 0.0,
       "head/kernel did not move")
  T.eq((out.params["head/bias"] - init["head/bias"]):abs():max():item(), 0.0)
  T.truthy((out.params["embedding/kernel"] - init["embedding/kernel"]):abs():max():item() > 0,
           "the rest trained")
end)

-- A config that records the keys read from it: the top level and `input` (what the trainers and
-- bv.data read in Lua); other tables are handed out as they are (the native code reads them,
-- and declares what it reads in lib/bv/config_keys/*.lua). Iterating counts as reading.
local function recording(cfg, reads)
  local WRAP = {input = true}
  local function wrap(t, path)
    local proxy = {}
    local function hand_out(k, v)
      if type(k) ~= "string" then return v end
      local p = path == "" and k or path .. "." .. k
      reads[p] = true
      if type(v) == "table" and v ~= null and WRAP[p] then return wrap(v, p) end
      return v
    end
    -- Copies of the proxy (evaluators.copy keeps metatables) are plain tables.
    return setmetatable(proxy, {
      __index = function(self, k)
        if rawequal(self, proxy) then return hand_out(k, t[k]) end
      end,
      __newindex = function(self, k, v)
        if rawequal(self, proxy) then t[k] = v else rawset(self, k, v) end
      end,
      __pairs = function(self)
        if not rawequal(self, proxy) then return next, self, nil end
        return function(_, k)
          local nk, nv = next(t, k)
          if nk ~= nil then return nk, hand_out(nk, nv) end
        end, self, nil
      end,
      __len = function(self) return rawequal(self, proxy) and #t or rawlen(self) end,
    })
  end
  return wrap(cfg, "")
end

-- The keys read (dotted paths) that no declaration covers, sorted.
local function undeclared(cfg, reads)
  local out = {}
  for path in pairs(reads) do
    local segs = {}
    for seg in path:gmatch("[^.]+") do segs[#segs + 1] = seg end
    if not config_keys.lookup(cfg, segs) then out[#out + 1] = path end
  end
  table.sort(out)
  return out
end

T.test("every key the classification trainer reads is declared", function()
  local trainer = require "bv.trainers.classification"
  local cfg = tiny(2)
  cfg.mixup = {p = 0.2}
  T.eq(config_keys.unknown(cfg), {}, "the test config itself")
  local reads = {}
  quietly(function() return trainer(recording(cfg, reads), tmp .. "/reads", {}) end)
  T.eq(undeclared(cfg, reads), {})
  T.truthy(reads.total_steps and reads.seed and reads["input.batch_size"]
           and reads["input.prefetch"] and reads.model_init and reads.accum_steps,
           "the proxy saw the reads, absent keys included")
end)

T.test("every key the paligemma trainer reads is declared", function()
  local trainer = require "bv.trainers.proj.paligemma.train"
  local sp = tmp .. "/tiny_sp.model"
  local lines = {}
  for i = 1, 60 do lines[i] = string.format("count %d lines %d cross", i % 3, i % 7) end
  bv.text.train_sentencepiece{lines = lines, vocab_size = 32, path = sp, gemma_like = true,
                              hard_vocab_limit = false}
  local tok = "sp(model='" .. sp .. "')"
  local pp = table.concat({"decode|value_range(-1, 1)", 'strfmt("count", outkey="prefix")',
    'strfmt("{label}", outkey="suffix")',
    bv.paligemma.combine_and_keep_train{text_len = 6, model = tok}}, "|")
  local cfg = tiny(2)
  cfg.trainer, cfg.num_classes, cfg.loss = "proj.paligemma.train", nil, nil
  cfg.input.pp = pp
  cfg.model_name = "proj.paligemma.paligemma"
  cfg.model = {img = {variant = "mu/8", scan = false},
               llm = {width = 32, depth = 1, mlp_dim = 64, num_heads = 2, num_kv_heads = 1,
                      head_dim = 16, vocab_size = bv.text.tokenizer(tok).vocab_size}}
  cfg.schedule = {{"img/.*", null}, {".*", {decay_type = "cosine"}}}
  cfg.label_smoothing = 0.1
  cfg.evals = {["val/pplx"] = {type = "proj.paligemma.perplexity", pred = "logits", key = "text",
                               shift_labels = true, data = cfg.evals.val.data, pp = pp,
                               log_steps = 2}}
  T.eq(config_keys.unknown(cfg), {}, "the test config itself")
  local reads = {}
  quietly(function()
    return trainer(recording(config_keys.without_nulls(cfg), reads), tmp .. "/pg", {})
  end)
  T.eq(undeclared(cfg, reads), {})
  T.truthy(reads.label_smoothing and reads.model_name and reads.mixup, "the proxy saw the reads")
end)

-- Declarations of what the native code and the evaluators read ------------------------------

local function read_text(path)
  local f = assert(io.open(ROOT .. "/" .. path, "r"))
  local s = f:read("a")
  f:close()
  return s
end

-- The names inside the first `{...}` after `anchor` in a C++ file.
local function cpp_list(path, anchor)
  local s = read_text(path)
  local at = assert(s:find(anchor, 1, true), anchor .. " in " .. path)
  local body = s:match("%b{}", at)
  local names = {}
  for n in body:gmatch('"([%w_]+)"') do names[#names + 1] = n end
  return names
end

local function assert_declared(scope_name, names, where)
  local scope = assert(config_keys.scope(scope_name), scope_name)
  for _, n in ipairs(names) do
    T.truthy(scope.by_name[n], string.format("%s reads '%s' (%s), which %s does not declare",
                                             where, n, where, scope_name))
  end
end

T.test("a model's scope is its native declaration: ?NAME, the warnings, the defaults", function()
  for _, name in ipairs(bv.models.names()) do
    local native = {}
    for i, k in ipairs(bv.models.config_keys(name)) do native[i] = k.name end
    T.eq(config_keys.names(config_keys.scope("model:" .. name)), native, name)
  end
  local vit = config_keys.scope("model:vit")
  T.eq(vit.by_name.patch_size.default, {16, 16})
  T.eq(vit.by_name.variant.default, nil)
  T.eq(math.type(config_keys.scope("model:proj.image_text.two_towers").by_name.temperature_init
    .default), "float")
  -- A part's options take the scope of the model its sibling key names (the default when unset).
  local cfg = {model_name = "proj.paligemma.paligemma", model = {img_model = "bit",
    img = {dpth = 26}, llm = {widt = 8}}, input = {batch_size = 8, data = {name = "bv:jsonl",
    fname = "x"}}, trainer = "proj.paligemma.train", total_steps = 1, lr = 0.1}
  local warnings = table.concat(config_keys.unknown(cfg), "\n")
  T.truthy(warnings:find("'model.img.dpth' is not one that model:bit reads (did you mean "
    .. "'depth'?)", 1, true), warnings)
  T.truthy(warnings:find("'model.llm.widt' is not one that model:ppp.gemma reads (did you "
    .. "mean 'width'?)", 1, true), warnings)
end)

T.test("the native optimizers and schedules read only declared keys", function()
  local tf = "runtime/optim/transforms.cpp"
  assert_declared("optax:big_vision.scale_by_adafactor", cpp_list(tf, "check_keys(kw,"), tf)
  local s, n = read_text(tf), 0
  for name, list in s:gmatch('name == "([%w_.]+)"%) {%s*check_keys%(kw,%s*(%b{})') do
    local names = {}
    for k in list:gmatch('"([%w_]+)"') do names[#names + 1] = k end
    assert_declared("optax:" .. name, names, tf)
    n = n + 1
  end
  T.eq(n, 5, "the optimizers found in " .. tf)
  -- Every schedule key the optimizer accepts belongs to some decay_type's declaration.
  local path = "runtime/optim/schedule.cpp"
  for _, k in ipairs(cpp_list(path, "std::vector<std::string> keys = {")) do
    local found = false
    for _, decay in ipairs({"linear", "polynomial", "cosine", "rsqrt", "stair"}) do
      found = found or config_keys.scope("schedule:" .. decay).by_name[k] ~= nil
    end
    T.truthy(found, path .. " reads '" .. k .. "', which no schedule:* declares")
  end
end)

T.test("every key an evaluator takes off its config is declared", function()
  for type_name, file in pairs({classification = "classification", mean = "mean",
                                fewshot_lsr = "fewshot_lsr",
                                ["proj.paligemma.perplexity"] = "proj/paligemma/perplexity",
                                ["proj.paligemma.transfers.vqa"] = "proj/paligemma/transfers/vqa"}) do
    local path = "lib/bv/evaluators/" .. file .. ".lua"
    local names = {}
    for n in read_text(path):gmatch('pop%(cfg, "([%w_]+)"') do
      if n:sub(1, 1) ~= "_" then names[#names + 1] = n end  -- _config_file, _device: the trainer's
    end
    assert_declared("evaluator:" .. type_name, names, path)
  end
  local names = {}
  for n in read_text("lib/bv/evaluators/init.lua"):gmatch('pop%(cfg, "([%w_]+)"') do
    if n:sub(1, 1) ~= "_" then names[#names + 1] = n end
  end
  assert_declared("evaluator:classification", names, "lib/bv/evaluators/init.lua")
end)

-- The reference -----------------------------------------------------------------------------

T.test("docs/config_keys.md is what scripts/config_keys writes", function()
  T.eq(read_text("docs/config_keys.md"), config_keys.markdown(),
       "run `build/bvlua run scripts/config_keys.lua` to update it")
end)

T.test("?topic in the REPL lists the declared keys", function()
  local repl = require "bv.repl"
  T.truthy(repl.help("vit"):find("patch_size%s+list%s+%[16,16%]"), repl.help("vit"))
  T.truthy(repl.help("scale_by_adafactor"):find("decay_rate%s+float%s+0.8"))
  T.truthy(repl.help("cosine"):find("warmup_steps%s+int%s+0"))
  T.truthy(repl.help("bv:jsonl"):find("fname%s+string"))
  T.truthy(repl.help("classification"):find("config keys of trainer:classification", 1, true))
  T.truthy(repl.help("classification"):find("loss_name", 1, true), "the evaluator's keys too")
  T.truthy(repl.help("total_epochs"):find("config key total_epochs (trainer:classification): "
                                          .. "float", 1, true))
end)

T.run()
