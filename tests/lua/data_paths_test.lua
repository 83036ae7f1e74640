-- A data file that does not exist is named with the config key that gives it; a relative path
-- is said to be relative to the current directory (named), and the lines data set's files come
-- with the command that draws them. The trainer checks its evaluators' data at the start.
-- (tests/cli/data_paths_test.sh runs bvlua from another directory.)
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

T.test("bv.fs.cwd is the directory relative paths are relative to", function()
  local cwd = bv.fs.cwd()
  T.eq(cwd:sub(1, 1), "/")
  T.truthy(bv.fs.exists(cwd .. "/tests/lua/data_paths_test.lua"), cwd)
end)

T.test("a relative lines file: the current directory and the make_lines command", function()
  local msg = T.raises(function()
    bv.data.training({data = {name = "bv:jsonl", fname = "nowhere/lines/train.jsonl"},
                      batch_size = 2})
  end, "bv:jsonl: no such file 'nowhere/lines/train.jsonl' (input.data.fname): a relative path "
       .. "is relative to the current directory, " .. bv.fs.cwd() .. "; run bvlua from the "
       .. "directory it is relative to, or give an absolute path. To draw the lines data set "
       .. "there: bvlua run scripts/make_lines.lua nowhere/lines")
  T.truthy(not msg:find("cannot open"), msg)
end)

T.test("an absolute path is not called relative; other data sets get no make_lines", function()
  local msg = T.raises(function()
    bv.data.inference({data = {name = "bv:jsonl", fname = tmp .. "/x/val.jsonl"}, batch_size = 2})
  end, "bv:jsonl: no such file '" .. tmp .. "/x/val.jsonl' (fname)")
  T.truthy(not msg:find("relative") and not msg:find("make_lines"), msg)
  T.raises(function() bv.data.source({name = "bv:imagefolder", root = "no/such/dir"}) end,
           "bv:imagefolder: no such directory 'no/such/dir' (root): a relative path")
  -- A mixture names the dataset.
  T.raises(function()
    bv.data.training({data = {a = 1}, a = {data = {name = "bv:jsonl", fname = tmp .. "/a.jsonl"}},
                      batch_size = 2})
  end, "(input.a.data.fname)")
end)

T.test("the trainer names a missing eval file before training", function()
  bv.fs.mkdirs(tmp .. "/d")
  local rows = {}
  for i = 1, 4 do
    bv.image.write_png(bv.zeros({8, 8, 3}, "uint8"), string.format("%s/d/%d.png", tmp, i))
    rows[i] = json.encode({image = i .. ".png", label = i % 3})
  end
  bv.fs.write_file(tmp .. "/d/train.jsonl", table.concat(rows, "\n"))
  local c = {seed = 0, total_steps = 2, num_classes = 3, loss = "softmax_xent",
             input = {data = {name = "bv:jsonl", fname = tmp .. "/d/train.jsonl",
                              fopen_keys = {image = tmp .. "/d"}}, batch_size = 2,
                      pp = 'decode|value_range(-1, 1)|onehot(3, key="label", key_result="labels")'},
             model_name = "vit", model = {variant = "mu/8", depth = 1},
             optax_name = "scale_by_adam", lr = 0.01, log_training_steps = 1,
             evals = {val = {type = "classification", loss_name = "softmax_xent", log_steps = 2,
                             skip_first = true,
                             data = {name = "bv:jsonl", fname = "data/no_lines/val.jsonl"}}}}
  local run = {}
  T.raises(function() require("bv.trainers.classification")(c, tmp .. "/w", run) end,
           "bv:jsonl: no such file 'data/no_lines/val.jsonl' (evals.val.data.fname): a relative "
           .. "path is relative to the current directory, " .. bv.fs.cwd())
  T.eq(run.state, nil, "run.state (the model was built before the check)")
end)

T.run()
