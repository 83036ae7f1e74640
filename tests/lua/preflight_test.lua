-- bv.preflight: every problem of a config at once, each naming its key, without training,
-- drawing or allocating; and bv.lines.plan, which says where a lines config's prepare would draw.
-- (tests/cli/dry_run_test.sh runs `bvlua train --dry-run`.)
local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local lines = require "bv.lines"
local preflight = require "bv.preflight"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp .. "/images")
local lines_of = {}
for i = 1, 10 do lines_of[i] = json.encode({image = i .. ".png", label = i % 3}) end
bv.fs.write_file(tmp .. "/train.jsonl", table.concat(lines_of, "\n") .. "\n")

local PP = 'decode|resize(8)|value_range(-1, 1)|onehot(3, key="label", key_result="labels")'

-- A config that trains: every check passes. Each test breaks one part of a fresh copy.
local function good()
  local data = {name = "bv:jsonl", fname = tmp .. "/train.jsonl",
                fopen_keys = {image = tmp .. "/images"}}
  return {
    input = {data = data, batch_size = 5, pp = PP},
    total_epochs = 2, log_training_steps = 1, num_classes = 3,
    model_name = "vit", model = {variant = "mu/4", depth = 1},
    optax_name = "scale_by_adam", lr = 1e-3,
    schedule = {decay_type = "cosine", warmup_steps = 1},
    evals = {val = {type = "classification", data = data, pp = PP}},
  }
end

local function problems(cfg, spec)
  local p, notes = preflight.problems(spec, cfg)
  return p, notes
end

T.test("a good config has no problem, and the note counts its steps", function()
  local p, notes = problems(good())
  T.eq(p, {})
  T.eq(notes, {"4 training steps (2 epochs of 10 examples, 5 a batch)"})
end)

T.test("every problem at once, each naming its key, in the order of the checks", function()
  local c = good()
  c.input.pp = "decode|resise(8)"
  c.evals.val.pp_fn = "nope"
  c.evals.val.type = "clasification"
  c.evals.test = {data = {name = "bv:jsonl", fname = tmp .. "/missing.jsonl"}, pp = PP}
  c.model.dept = 3
  c.model_init = tmp .. "/init.npz"
  c.schedule.warmup_steps = 4
  local p = problems(c)
  T.eq(#p, 8, table.concat(p, "\n"))
  T.truthy(p[1]:find("^input.pp: pp: unknown op 'resise' .*did you mean 'resize'"), p[1])
  T.truthy(p[2]:find("^evals.val.pp_fn: pp: unknown op 'nope'"), p[2])
  T.truthy(p[3]:find("^evals.test: evaluators: unknown evaluator type 'test'"), p[3])
  T.truthy(p[4]:find("^evals.val.type: evaluators: unknown evaluator type 'clasification' "
                     .. "%(did you mean 'classification'%?%)"), p[4])
  T.eq(p[5], "bv:jsonl: no such file '" .. tmp .. "/missing.jsonl' (evals.test.data.fname)")
  T.eq(p[6], "model: vit: unknown config key 'dept'")
  T.eq(p[7], "model_init: no such file " .. tmp .. "/init.npz")
  T.eq(p[8], "config.schedule: warmup_steps (4) must be less than total_steps (4)")
end)

T.test("the model: its name, its options as the trainer passes them, no weights", function()
  local c = good()
  c.model_name = "vitt"
  T.truthy(problems(c)[1]:find("^model_name: unknown model 'vitt' %(known: vit, bit"),
           problems(c)[1])
  c = good()
  c.model_name, c.model = "bit", {depth = 26, width = 0.3}
  T.truthy(problems(c)[1]:find("^model: bit: width 0.3 gives"), problems(c)[1])
  -- The two towers have no classification step: said before any data is read.
  c = good()
  c.model_name, c.model = "proj.image_text.two_towers", {}
  T.truthy(problems(c)[1]:find("^model_name: proj.image_text.two_towers has no classification "
                               .. "step", 1), problems(c)[1])
  local train = dofile("lib/bv/trainers/classification.lua")
  T.raises(function() train(c, tmp .. "/never_written", {}) end,
           "config.model_name: proj.image_text.two_towers has no classification step")
  T.truthy(not bv.fs.exists(tmp .. "/never_written"), "nothing written")
  -- A trainer of the user's own: only the name is checked.
  c = good()
  c.trainer, c.model = tmp .. "/trainer.lua", {anything = 1}
  T.eq(problems(c), {})
  c.model_name = "nope"
  T.truthy(problems(c)[1]:find("^model_name: unknown model 'nope'"), problems(c)[1])
end)

T.test("model_init: a missing part, a vanity name without BV_GEMMA_DIR, a subtree", function()
  local c = good()
  bv.fs.write_file(tmp .. "/there.npz", "")
  c.model_init = {img = tmp .. "/there.npz:img", llm = "gone.npz"}
  T.eq(problems(c), {"model_init.llm: no such file gone.npz (relative to the current directory, "
                     .. bv.fs.cwd() .. ")"})
  if not os.getenv("BV_GEMMA_DIR") then
    c.model_init = "pt_224"
    T.eq(problems(c), {"model_init: 'pt_224' is a vanity name for $BV_GEMMA_DIR/pt_224.npz, but "
                       .. "BV_GEMMA_DIR is not set"})
  end
end)

T.test("the schedule and optimizer: decay type, optax_name, a stand-in when left out", function()
  local c = good()
  c.schedule.decay_type = "cosin"
  T.truthy(problems(c)[1]:find("unknown decay_type 'cosin'", 1, true), problems(c)[1])
  c = good()
  c.optax_name = "scale_by_adm"
  T.truthy(problems(c)[1]:find("^unknown optax_name 'scale_by_adm'"), problems(c)[1])
  -- No optimizer given (the trainer says so): the schedule is still checked.
  c = good()
  c.optax_name, c.lr, c.schedule.warmup_steps = nil, nil, 9
  T.eq(problems(c), {"config.schedule: warmup_steps (9) must be less than total_steps (4)"})
end)

T.test("the run's length: none given, two given, and batch_size", function()
  local c = good()
  c.total_epochs = nil
  T.truthy(problems(c)[1]:find("none of total_steps, total_examples, total_epochs", 1, true),
           problems(c)[1])
  c.total_epochs, c.total_steps = 2, 3
  T.truthy(problems(c)[1]:find("only one of total_steps, total_epochs", 1, true), problems(c)[1])
  c = good()
  c.input.batch_size = 0
  T.eq(problems(c)[1], "input.batch_size: must be a positive integer, got 0")
  -- A None (bv.null) entry is absent, as the trainer reads it.
  c = good()
  c.total_steps = bv.null
  T.eq(problems(c), {})
end)

T.test("data: a missing image directory, a mixture dataset, an imagefolder", function()
  local c = good()
  c.input.data.fopen_keys.image = tmp .. "/nothing"
  T.eq(problems(c), {"input.data.fopen_keys.image: no such directory '" .. tmp .. "/nothing'",
                     "evals.val.data.fopen_keys.image: no such directory '" .. tmp .. "/nothing'"})
  c = good()
  c.input = {data = {a = 1, b = 0}, batch_size = 5,
             a = {data = good().input.data, pp = PP},
             b = {data = {name = "bv:imagefolder", root = tmp .. "/no_root"}, pp = "decod"}}
  local p = problems(c)
  T.eq(#p, 2, table.concat(p, "\n"))
  T.truthy(p[1]:find("^input.b.pp: pp: unknown op 'decod'"), p[1])
  T.eq(p[2], "bv:imagefolder: no such directory '" .. tmp .. "/no_root' (input.b.data.root)")
end)

T.test("missing data a config's prepare makes is a note; the steps are counted later", function()
  local cfg_file = tmp .. "/with_prepare.lua"
  bv.fs.write_file(cfg_file, "return {get_config = function() return {} end, "
                   .. "prepare = function() end}")
  local c = good()
  c.input.data = {name = "bv:jsonl", fname = tmp .. "/later/train.jsonl"}
  local p, notes = problems(c, cfg_file)
  T.eq(p, {})
  T.eq(notes, {"input.data: " .. tmp .. "/later/train.jsonl is not there yet; the config's "
               .. "prepare, which bvlua train runs first, may make it",
               "total_epochs: the steps are counted once the training data is there"})
  -- Without a prepare, a problem.
  p = problems(c)
  T.eq(#p, 1, table.concat(p, "\n"))
  T.truthy(p[1]:find("no such file '" .. tmp .. "/later/train.jsonl' (input.data.fname)", 1, true))
end)

T.test("a lines config: what its prepare draws, and a directory outside refused", function()
  local cfg_file = tmp .. "/lines_cfg.lua"
  bv.fs.write_file(cfg_file, "local lines = require 'bv.lines'\n"
                   .. "return {get_config = function() return {} end, prepare = lines.prepare}")
  local c = good()
  c.input.data = lines.data("preflight_no_such/lines", "train")
  c.evals.val.data = lines.data("preflight_no_such/lines", "val")
  local p, notes = problems(c, cfg_file)
  T.eq(p, {})
  T.eq(notes[1], "input.data: preflight_no_such/lines/train.jsonl is not there yet: bvlua train "
                 .. "draws the lines data set (12,000 images, 49 MB) into preflight_no_such/lines "
                 .. "first (the config's prepare)")
  T.eq(#notes, 2, table.concat(notes, "\n"))  -- the val file is drawn with it: one note
  T.truthy(not bv.fs.exists("preflight_no_such"), "nothing drawn")
  c.input.data = lines.data(tmp .. "/out/lines", "train")
  p = problems(c, cfg_file)
  T.eq(#p, 2, table.concat(p, "\n"))
  T.truthy(p[1]:find("^bv.lines: refusing to draw the lines data set %(12,000 images, 49 MB%) "
                     .. "into " .. tmp:gsub("%p", "%%%0") .. "/out/lines"), p[1])
  T.truthy(p[1]:find("BV_LINES_ANYWHERE=1", 1, true), p[1])
  T.truthy(p[2]:find("(evals.val.data.fname)", 1, true), p[2])
end)

T.test("lines.plan: below the current directory or not, by the path's text", function()
  local function plan(dir) return lines.plan({input = {data = lines.data(dir, "train")}}) end
  local cwd = bv.fs.cwd()
  T.eq(plan("data/x_lines"), {dir = "data/x_lines"})
  T.eq(plan("./a/../b_lines"), {dir = "./a/../b_lines"})
  T.eq(plan(cwd .. "/data/y_lines"), {dir = cwd .. "/data/y_lines"})
  T.eq(plan("."), {dir = "."})
  for _, dir in ipairs({"../lines", "a/../../lines", "/nonexistent/lines", cwd .. "x/lines"}) do
    local p = plan(dir)
    T.truthy(p and p.refused and p.refused:find("into " .. dir .. " ", 1, true), dir)
  end
  T.eq(lines.plan({input = {data = {name = "bv:jsonl", fname = "x/val.jsonl"}}}), nil, "not train")
end)

T.test("lines.plan: the data set is there only when train, val and test.jsonl all are", function()
  -- As scripts/make_lines.lua writes them, one split after the other: a drawing cut short (or
  -- still under way in another process) leaves train.jsonl without val.jsonl.
  local dir = "preflight_partial_lines"
  local function plan() return lines.plan({input = {data = lines.data(dir, "train")}}) end
  bv.fs.mkdirs(dir)
  local ok, err = pcall(function()
    T.eq(plan(), {dir = dir}, "empty")
    bv.fs.write_file(dir .. "/train.jsonl", "")
    T.eq(plan(), {dir = dir}, "train only")
    bv.fs.write_file(dir .. "/val.jsonl", "")
    T.eq(plan(), {dir = dir}, "no test.jsonl")
    bv.fs.write_file(dir .. "/test.jsonl", "")  -- make_lines --test 0 writes it empty
    T.eq(plan(), nil, "all three")
  end)
  os.execute("rm -rf '" .. dir .. "'")
  assert(ok, err)
end)

T.test("lines.plan: a symlinked current directory ($PWD) and the current directory /", function()
  local cwd, getenv = bv.fs.cwd, os.getenv
  local function under(cur, pwd, path)
    bv.fs.cwd = function() return cur end
    os.getenv = function(k) if k == "PWD" then return pwd end return getenv(k) end
    local ok, r = pcall(lines.under_cwd, path)
    bv.fs.cwd, os.getenv = cwd, getenv
    assert(ok, r)
    return r
  end
  -- bv.fs.cwd() is the resolved directory; $PWD names it through the link the user went in by
  -- (it must be a directory: tmp stands in for the link).
  T.eq(under("/real/dir", tmp, tmp .. "/data/lines"), true, "below $PWD")
  T.eq(under("/real/dir", tmp, "/real/dir/data/lines"), true, "below the resolved directory")
  T.eq(under("/real/dir", tmp, tmp .. "/../lines"), false, "climbing out of $PWD")
  T.eq(under("/real/dir", tmp, tmp .. "x/lines"), false, "a sibling of $PWD")
  T.eq(under("/real/dir", "/no/such/dir", "/no/such/dir/lines"), false, "$PWD no directory")
  T.eq(under("/real/dir", "relative", "/real/dir/lines"), true, "a relative $PWD is ignored")
  -- The root: every absolute path is below it, but not one that climbs above it.
  T.eq(under("/", "/", "/tmp/data/lines"), true, "cwd /")
  T.eq(under("/", "/", "/"), true, "cwd / itself")
  T.eq(under("/", nil, "data/lines"), true, "relative, cwd /")
end)

T.test("the trainer's pp check raises the first problem, naming its key", function()
  local utils = require "bv.trainers.utils"
  local c = good()
  c.evals.val.pp = "decode|valu_range(-1, 1)"
  T.raises(function() utils.check_pp_strings(c) end,
           "evals.val.pp: pp: unknown op 'valu_range' in 'valu_range(-1, 1)' (did you mean "
           .. "'value_range'?)")
  T.eq(preflight.pp_problems(good()), {})
end)

T.test("the config's register_pp_ops runs first; its failure is a problem", function()
  local cfg_file = tmp .. "/own_op.lua"
  bv.fs.write_file(cfg_file, "return {get_config = function() return {} end, register_pp_ops = "
    .. "function() bv.pp.register('preflight_own', function() return function(d) return d end "
    .. "end, 'preflight_own(): the example') end}")
  local c = good()
  c.input.pp = "preflight_own|" .. PP
  T.eq(problems(c, cfg_file), {})
  bv.fs.write_file(cfg_file, "return {get_config = function() return {} end, register_pp_ops = "
    .. "function() error('no ops today', 0) end}")
  c.input.pp = PP
  T.eq(problems(c, cfg_file), {"register_pp_ops: no ops today"})
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
