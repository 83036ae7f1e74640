-- The Lua half of the REPL (lib/bv/repl.lua) and the inspection objects it shows
-- (lib/bv/inspect.lua): how values print, what Tab offers, what `?name` answers, and lazy
-- checkpoints and runs. The prompt itself is driven through a terminal in
-- tests/cli/repl_test.sh.
local T = require "tests.lua.lib.testing"
local repl = require "bv.repl"
local inspect = require "bv.inspect"
local json = require "bv.json"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

-- printing ------------------------------------------------------------------------------------

T.test("show: scalars, one-line tables, strings quoted inside tables", function()
  T.eq(repl.show(42), "42")
  T.eq(repl.show("plain"), "plain")
  T.eq(repl.show({1, 2, "x\ny"}), '{1, 2, "x\\ny"}')
  T.eq(repl.show({b = 1, a = true, [10] = 0, ["not a name"] = 2}),
       '{[10] = 0, a = true, b = 1, ["not a name"] = 2}')
  T.eq(repl.show({}), "{}")
end)

T.test("show: long tables break into lines, deep ones stop at repl.depth, cycles are marked",
       function()
  local long = {}
  for i = 1, 30 do long["key_" .. i] = i end
  local text = repl.show(long)
  T.truthy(text:find("^{\n  key_1 = 1,\n  key_2 = 2,\n"), text)  -- natural order: 2 before 10
  T.truthy(text:find("\n  key_30 = 30,\n}$"), text)
  local deep = {a = {b = {c = {d = {e = {f = 1}}}}}}
  T.eq(repl.show(deep), "{a = {b = {c = {d = {...}}}}}")
  local cyclic = {name = "me"}
  cyclic.self = cyclic
  T.eq(repl.show(cyclic), '{name = "me", self = <cycle>}')
  local many = {}
  for i = 1, 60 do many[i] = i end
  T.truthy(repl.show(many):find("... (10 more)", 1, true))
end)

T.test("show: tensors with values when small, one line inside tables", function()
  local t = bv.tensor({{1, 2}, {3, 4}})
  T.eq(repl.show(t), t:format())
  T.truthy(repl.show(t):find("[[1, 2],", 1, true))
  local big = bv.zeros({2000})
  T.eq(repl.show(big), tostring(big))
  T.eq(repl.show({t, n = 1}), "{" .. tostring(t) .. ", n = 1}")
end)

T.test("show: a table of tensors is a tree with dtypes, shapes and counts", function()
  local params = {["img/head/bias"] = bv.zeros({3}), ["img/head/kernel"] = bv.zeros({4, 3}),
                  ["img/embedding/kernel"] = bv.zeros({2, 2, 3, 8}, "bfloat16"),
                  ["img/Transformer/encoderblock_10/x"] = bv.zeros({2}),
                  ["img/Transformer/encoderblock_2/x"] = bv.zeros({2})}
  -- Columns padded to their widest cell, two spaces apart; counts right-aligned.
  T.eq(repl.show(params), table.concat({
    "img/                                          115",
    "  Transformer/                                  4",
    "    encoderblock_2/                             2",
    "      x               float32   [2]             2",
    "    encoderblock_10/                            2",
    "      x               float32   [2]             2",
    "  embedding/                                   96",
    "    kernel            bfloat16  [2, 2, 3, 8]   96",
    "  head/                                        15",
    "    bias              float32   [3]             3",
    "    kernel            float32   [4, 3]         12",
    "5 tensors, 115 parameters, 268 B"}, "\n"))
  -- Nested tables of tensors give the same tree; a batch (no "/") counts elements.
  local nested = {img = {head = {bias = bv.zeros({3})}}}
  T.truthy(repl.show(nested):find("    bias  float32  [3]  3", 1, true), repl.show(nested))
  local batch = {image = bv.zeros({2, 4, 4, 3}), labels = bv.zeros({2, 3})}
  T.truthy(repl.show(batch):find("2 tensors, 102 elements", 1, true))
end)

T.test("show: big trees fold their deeper folders to fit repl.max_rows", function()
  local params = {}
  for i = 0, 39 do
    for _, leaf in ipairs({"a/kernel", "a/bias", "b/kernel"}) do
      params[string.format("enc/block_%d/%s", i, leaf)] = bv.zeros({2})
    end
  end
  local text = repl.show(params)
  T.truthy(text:find("\n  block_7/ +%(3 tensors%) +6\n"), text)
  T.truthy(not text:find("kernel"), "folded below the blocks")
  T.truthy(text:find("120 tensors, 240 parameters", 1, true))
end)

T.test("show: a model is the tree of its parameter shapes", function()
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 2, image_size = 8})
  local text = repl.show(m)
  T.truthy(text:find("^model vit "), text)
  T.truthy(text:find("head/", 1, true), text)
  T.truthy(text:find(inspect.commas(m:param_count()) .. " parameters", 1, true), text)
end)

-- completion ----------------------------------------------------------------------------------

T.test("complete: globals, keywords and fields after '.'", function()
  local start, c = repl.complete("x = bv.o")
  T.eq(start, 5)
  T.truthy(has(c, "bv.ones") and has(c, "bv.optim"), T.dump(c))
  start, c = repl.complete("bv.ckpt.load_n")
  T.eq(c, {"bv.ckpt.load_npz"})
  _, c = repl.complete("bv.insp")   -- a module bv loads on first use
  T.eq(c, {"bv.inspect"})
  _, c = repl.complete("fun")
  T.truthy(has(c, "function"), T.dump(c))
  _, c = repl.complete("prin")
  T.eq(c, {"print"})
  _, c = repl.complete("1.5")
  T.eq(c, {})
end)

T.test("complete: methods after ':' follow metatables (native types keep theirs in `methods`)",
       function()
  _G.repl_t = bv.zeros({2})
  local _, c = repl.complete("repl_t:sha")
  T.eq(c, {"repl_t:shape"})
  local base = {meth = function() end, field = 2}
  _G.repl_obj = setmetatable({own = 1}, {__index = setmetatable({mid = function() end},
                                                                {__index = base})})
  _, c = repl.complete("repl_obj.")
  T.eq(c, {"repl_obj.field", "repl_obj.meth", "repl_obj.mid", "repl_obj.own"})
  _, c = repl.complete("repl_obj:")
  T.eq(c, {"repl_obj:meth", "repl_obj:mid"})
  _, c = repl.complete('s = ("x"):up')
  T.eq(c, {}, "a literal is not a name path")
  _G.repl_s = "text"
  _, c = repl.complete("repl_s:up")
  T.eq(c, {"repl_s:upper"})
  _G.repl_t, _G.repl_obj, _G.repl_s = nil, nil, nil
end)

T.test("complete: file names inside a string", function()
  bv.fs.mkdirs(tmp .. "/files/sub")
  bv.fs.write_file(tmp .. "/files/params.npz", "")
  bv.fs.write_file(tmp .. "/files/.hidden", "")
  local line = 'ckpt = bv.inspect.checkpoint("' .. tmp .. "/files/"
  local start, c = repl.complete(line)
  T.eq(start, #'ckpt = bv.inspect.checkpoint("' + 1)
  T.eq(c, {tmp .. "/files/params.npz", tmp .. "/files/sub/"})
  _, c = repl.complete(line .. "p")
  T.eq(c, {tmp .. "/files/params.npz"})
  _, c = repl.complete(line .. ".")
  T.eq(c, {tmp .. "/files/.hidden"})
  _, c = repl.complete("x = 'a' .. bv.on")
  T.eq(c, {"bv.ones"}, "a closed string is not completed as a path")
end)

-- help ----------------------------------------------------------------------------------------

T.test("help: pp ops, models, evaluators, optimizers and Lua functions", function()
  T.truthy(repl.help("resize"):find("^pp op resize%(size, method='bilinear'"), repl.help("resize"))
  T.truthy(repl.help("vit"):find("^model vit: "), repl.help("vit"))
  T.truthy(repl.help("classification"):find("top%-1 precision"), repl.help("classification"))
  T.truthy(repl.help("big_vision.sgd"):find("plain SGD"), repl.help("big_vision.sgd"))
  T.truthy(repl.help("momentum_hp"):find("big_vision.momentum_hp", 1, true))
  local doc = repl.help("bv.inspect.checkpoint")
  T.truthy(doc:find("function M.checkpoint(path)", 1, true), doc)
  T.truthy(doc:find("A checkpoint opened lazily", 1, true), doc)
  T.truthy(repl.help("bv.zeros"):find("native function"), repl.help("bv.zeros"))
  T.truthy(repl.help("bv.metrics"):find("big_vision's metric writer", 1, true))
  T.truthy(repl.help(""):find("Ctrl%-C"))
  T.truthy(repl.help("no_such_thing"):find("no doc for 'no_such_thing'", 1, true))
end)

T.test("special: '?' lines are answered, Lua is not", function()
  T.eq(repl.special("x = 1"), false)
  T.eq(repl.special("print('?')"), false)
end)

-- checkpoints ---------------------------------------------------------------------------------

local function sample_params()
  return {["img/head/kernel"] = bv.tensor({{3, 4}, {0, 0}}):to("float32"),
          ["img/head/bias"] = bv.tensor({1, -1}):to("float32"),
          ["txt/emb"] = bv.arange(0, 6):to("float32"):reshape({2, 3})}
end

T.test("checkpoint: lazy tree, one tensor by name, stats", function()
  local path = tmp .. "/p.npz"
  bv.ckpt.save_npz(path, sample_params())
  local ckpt = inspect.checkpoint(path)
  T.eq(ckpt:format(), "npz")
  T.eq(ckpt:names(), {"img/head/bias", "img/head/kernel", "txt/emb"})
  T.eq(ckpt:count(), 12)
  T.truthy(ckpt["img/head/kernel"] == sample_params()["img/head/kernel"])
  T.raises(function() return ckpt["img/head/kernl"] end, "names under 'img/head/'")
  local tree = tostring(ckpt:tree("img"))
  T.truthy(tree:find("p.npz under img/ (npz): 2 tensors, 6 parameters, 24 B", 1, true), tree)
  T.truthy(tree:find("\nhead/ +6\n  bias +float32 +%[2%] +2\n  kernel +float32 +%[2, 2%] +4\n"),
           tree)
  local stats = ckpt:stats("head/kernel")
  T.eq(#stats.rows, 1)
  T.near(stats.rows[1].norm, 5)
  T.near(stats.rows[1].mean, 1.75)
  T.near(stats.rows[1].std, math.sqrt((1.25 ^ 2 + 2.25 ^ 2 + 2 * 1.75 ^ 2) / 4), 1e-6)
  T.eq(stats.rows[1].max, 4)
  T.truthy(tostring(stats):find("img/head/kernel +float32 +%[2, 2%] +5 +1%.75"), tostring(stats))
  T.raises(function() ckpt:stats("nothing") end, "no tensor name matches 'nothing'")
  _G.repl_ckpt = ckpt  -- Tab offers its methods without loading anything
  local _, c = repl.complete("repl_ckpt:tr")
  T.eq(c, {"repl_ckpt:tree"})
  _G.repl_ckpt = nil
  local sub = ckpt:sub("img")
  T.eq(sub:names(), {"head/bias", "head/kernel"})
  T.truthy(sub["head/bias"] == sample_params()["img/head/bias"])
  T.eq(ckpt:params("txt").emb:shape(), {2, 3})
end)

T.test("checkpoint: diff names what changed and by how much", function()
  local a = sample_params()
  bv.ckpt.save_npz(tmp .. "/a.npz", a)
  local b = sample_params()
  b["img/head/kernel"] = bv.tensor({{3, 4}, {0, 0.5}}):to("float32")
  b["txt/emb"] = nil
  b["new"] = bv.zeros({1})
  b["img/head/bias"] = bv.zeros({3})
  bv.ckpt.save_npz(tmp .. "/b.npz", b)
  local d = inspect.checkpoint(tmp .. "/a.npz"):diff(tmp .. "/b.npz")
  T.eq(#d.changed, 1)
  T.eq(d.changed[1].name, "img/head/kernel")
  T.near(d.changed[1].max_abs, 0.5)
  T.near(d.changed[1].rel, 0.1)
  T.eq(d.only_here, {"txt/emb"})
  T.eq(d.only_there, {"new"})
  T.eq(d.reshaped[1].name, "img/head/bias")
  T.truthy(tostring(d):find("1 changed, 0 identical, 1 reshaped, 1 only here, 1 only there", 1,
                            true), tostring(d))
  -- Against live parameters (a table of tensors), and with a pattern.
  local live = sample_params()
  local d2 = inspect.checkpoint(tmp .. "/a.npz"):diff(live, "^img/")
  T.eq(d2.same, {"img/head/bias", "img/head/kernel"})
  T.eq(#d2.changed, 0)
end)

-- runs ----------------------------------------------------------------------------------------

T.test("run: config, metrics, model with the checkpoint's params, pp, predict", function()
  local work = tmp .. "/run"
  bv.fs.mkdirs(work)
  local pp = "decode|resize(8)|value_range(-1, 1)|onehot(2, key='label', key_result='labels')"
    .. "|keep('image', 'labels')"
  local config = {model_name = "vit", model = {variant = "mu/4"}, num_classes = 2,
                  loss = "softmax_xent", evals = {val = {type = "classification", pp = pp}},
                  input = {pp = pp}}
  bv.fs.write_file(work .. "/config.json", json.encode(config))
  bv.fs.write_file(work .. "/big_vision_metrics.txt", table.concat({
    '{"step": 1, "training_loss": 0.9}', '{"step": 2, "training_loss": 0.7, "val/prec@1": 0.5}',
    '{"step": 3, "training_loss": 0.6}'}, "\n"))
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 2, image_size = 8})
  local params = m:init(3)
  local tensors = {}
  for name, t in pairs(params) do tensors["params/" .. name] = t end
  bv.ckpt.save(work, 3, tensors, {})

  local run = inspect.run(work)
  T.eq(run.config.num_classes, 2)
  T.eq(run.ckpt:step(), 3)
  local steps, values = run.metrics("training_loss")
  T.eq(steps, {1, 2, 3}); T.eq(values, {0.9, 0.7, 0.6})
  steps, values = run:metrics("val/prec@1")
  T.eq(steps, {2}); T.eq(values, {0.5})
  T.raises(function() run.metrics("val/acc") end, "no metric 'val/acc'")
  T.eq(#run.metrics(), 3)
  T.truthy(tostring(run.metrics()):find("training_loss +3 +0%.6 +3"), tostring(run.metrics()))

  local model, loaded = run.model()
  T.eq(model.cfg.image_size, {8, 8}, "from the checkpoint's position embedding")
  for name, t in pairs(params) do T.truthy(loaded[name] == t, name) end

  local img = bv.arange(0, 8 * 8 * 3):reshape({8, 8, 3}):to("uint8")
  bv.image.write_png(img, work .. "/img.png")
  local ex = run.pp("val")({image = bv.fs.read_file(work .. "/img.png"), label = 1})
  T.eq(ex.image:shape(), {8, 8, 3}); T.eq(ex.labels:totable(), {0, 1})
  local p = run.predict(work .. "/img.png")
  T.eq(p.skipped, {"onehot(2, key='label', key_result='labels')"})
  local want = model:apply(loaded, ex.image:unsqueeze(1)):softmax(-1)
  T.truthy(p.probs:allclose(want), "the model applied to the pp'd image")
  T.near(p.top[1].prob + p.top[2].prob, 1, 1e-5)
  T.truthy(tostring(p):find("img.png: logits [1, 2] through the pp of evals.val", 1, true))
  T.truthy(tostring(run):find("ckpt:    " .. work, 1, true), tostring(run))
  -- The top class id is 0-based, as the data's labels: argmax (1-based) minus 1.
  local id = (want:argmax(-1) - 1)[1]:item()
  T.eq(p.class, id); T.eq(p.top[1].class, id); T.eq(p.name, nil)
  T.near(p.prob, want[1][id + 1]:item(), 1e-6)
  T.truthy(tostring(p):find("class ids are 0-based, as the data's labels; "
                            .. "logits:argmax(-1) - 1 is the class id", 1, true), tostring(p))

  -- Data with class names (an image folder: sorted folder names): each class comes with its
  -- name, class id c being the (c + 1)-th folder.
  for _, c in ipairs({"ant", "bee"}) do
    bv.fs.mkdirs(tmp .. "/folder/" .. c)
    bv.image.write_png(img, tmp .. "/folder/" .. c .. "/x.png")
  end
  config.evals.val.data = {name = "bv:imagefolder", root = tmp .. "/folder"}
  bv.fs.write_file(work .. "/config.json", json.encode(config))
  local named = inspect.run(work).predict(work .. "/img.png")
  T.eq(named.class, id)
  T.eq(named.name, ({"ant", "bee"})[id + 1])
  T.eq(named.top[2].name, ({"ant", "bee"})[2 - id])
  T.truthy(tostring(named):find("class +name +softmax", 1), tostring(named))
  T.truthy(tostring(named):find(id .. " +" .. named.name .. " +0%.%d+"), tostring(named))
end)

T.test("run.predict: a TFDS ClassLabel's names beside the class ids", function()
  local work = tmp .. "/tfds_run"
  bv.fs.mkdirs(work)
  -- The fixture's label is a ClassLabel named horizontal, vertical, diagonal; its id a Tensor.
  local fixture = require("bv.config").tree_path("tests/data/tfds")
  local names = {"horizontal", "vertical", "diagonal"}
  local function pp(key)
    return "decode|resize(8)|value_range(-1, 1)|onehot(3, key='" .. key .. "', "
      .. "key_result='labels')|keep('image', 'labels')"
  end
  local function data(split, dir)
    return {name = "lines_tfds", split = split, data_dir = dir or fixture}
  end
  local config = {model_name = "vit", model = {variant = "mu/4"}, num_classes = 3,
                  loss = "softmax_xent", input = {data = data("train"), pp = pp("label")},
                  evals = {val = {type = "classification", data = data("test"),
                                  pp = pp("label")}}}
  local function write(cfg) bv.fs.write_file(work .. "/config.json", json.encode(cfg)) end
  write(config)
  local m = bv.models.build("vit", {variant = "mu/4", num_classes = 3, image_size = 8})
  local tensors = {}
  for name, t in pairs(m:init(5)) do tensors["params/" .. name] = t end
  bv.ckpt.save(work, 1, tensors, {})
  local img = bv.arange(0, 8 * 8 * 3):reshape({8, 8, 3}):to("uint8")
  bv.image.write_png(img, work .. "/img.png")

  local p = inspect.run(work).predict(work .. "/img.png")
  T.eq(p.name, names[p.class + 1])
  T.eq(#p.top, 3)
  for _, t in ipairs(p.top) do T.eq(t.name, names[t.class + 1]) end
  T.truthy(tostring(p):find("class +name +softmax"), tostring(p))
  T.truthy(tostring(p):find(p.class .. " +" .. p.name .. " +0%.%d+"), tostring(p))

  -- The onehot reads a feature that is not a ClassLabel (the id): no names.
  config.evals.val.pp, config.input.pp = pp("id"), pp("id")
  write(config)
  T.eq(inspect.run(work).predict(work .. "/img.png").name, nil)
  -- The eval reads JSON-L, the training data is the TFDS dataset: the training data's names.
  config.evals.val.pp, config.input.pp = pp("label"), pp("label")
  config.evals.val.data = {name = "bv:jsonl", fname = work .. "/none.jsonl"}
  write(config)
  p = inspect.run(work).predict(work .. "/img.png")
  T.eq(p.name, names[p.class + 1])
  -- A dataset that is not there: no names, and a note that says why.
  config.input.data = data("train", work .. "/nowhere")
  write(config)
  p = inspect.run(work).predict(work .. "/img.png")
  T.eq(p.name, nil)
  T.truthy(tostring(p):find("(no class names: tfds: dataset 'lines_tfds': no TFDS data directory "
                            .. work .. "/nowhere", 1, true), tostring(p))
  -- The REPL's help says where the names come from.
  T.truthy(repl.help(""):find("TFDS ClassLabel's names", 1, true), repl.help(""))
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
