-- bv.evaluators: from_config's defaults and errors, and the classification and mean evaluators
-- on small generated JSON-L data sets with fake predict functions whose results are known.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local evaluators = require "bv.evaluators"
local losses = require "bv.losses"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local function write_jsonl(name, rows)
  local lines = {}
  for i, r in ipairs(rows) do lines[i] = json.encode(r) end
  local path = tmp .. "/" .. name
  bv.fs.write_file(path, table.concat(lines, "\n") .. "\n")
  return {name = "bv:jsonl", fname = path}
end

-- A type that keeps what from_config hands it.
local recorded = {}
evaluators.register("recorder", {new = function(predict_fn, cfg)
  local e = {predict_fn = predict_fn, cfg = cfg}
  recorded[#recorded + 1] = e
  return e
end})

local function predict() return "predict" end
local function loss_fn() return "loss" end

T.test("from_config: sorted names, popped keys and their defaults", function()
  local config = {
    input = {batch_size = 16},
    evals = {
      recorder = {log_steps = 100, extra = {nested = 1}},     -- type defaults to the name
      alpha = {type = "recorder", pred = "loss", prefix = "x/", skip_first = true,
               log_epochs = 2, batch_size = 4, pred_kw = {temperature = 2}},
    },
  }
  local before = json.encode(config)
  local seen_cfgs = {}
  local function get_steps(key, cfg)
    seen_cfgs[#seen_cfgs + 1] = {key = key, cfg = evaluators.copy(cfg)}
    if cfg.log_epochs then return cfg.log_epochs * 50 end
    return cfg.log_steps
  end
  recorded = {}
  local evs = evaluators.from_config(config, {predict = predict, loss = loss_fn}, get_steps)
  T.eq(#evs, 2)
  T.eq({evs[1].name, evs[1].prefix, evs[1].log_steps, evs[1].skip_first},
       {"alpha", "x/", 100, true})
  T.eq({evs[2].name, evs[2].prefix, evs[2].log_steps, evs[2].skip_first},
       {"recorder", "recorder/", 100, false})
  T.eq(evs[1].evaluator, recorded[1])
  -- What the type gets: no generic keys, batch_size filled in.
  T.eq(recorded[1].cfg, {batch_size = 4})
  T.eq(recorded[2].cfg, {batch_size = 16, extra = {nested = 1}})
  T.eq(recorded[2].predict_fn, predict)
  -- get_steps sees the eval's config with its log_* keys (and without the popped ones).
  T.eq(seen_cfgs[1], {key = "log", cfg = {log_epochs = 2, batch_size = 4}})
  T.eq(seen_cfgs[2], {key = "log", cfg = {log_steps = 100, extra = {nested = 1}}})
  -- pred_kw is bound: the predict function gets it as its keyword table, the caller's win.
  local got
  local evs2 = evaluators.from_config(
    {input = {batch_size = 2}, evals = {recorder = {pred_kw = {a = 1, b = 2}}}},
    {predict = function(p, b, kw) got = {p, b, kw} end})
  evs2[1].evaluator.predict_fn("P", "B", {b = 3})
  T.eq(got, {"P", "B", {a = 1, b = 3}})
  T.eq(evs2[1].log_steps, nil)                     -- no log_* key: never run in the loop
  T.eq(json.encode(config), before, "the config is not changed")
end)

T.test("from_config: batch_size falls back to batch_size_eval, input.batch_size, batch_size",
       function()
  local function bs(config)
    recorded = {}
    config.evals = {recorder = {}}
    evaluators.from_config(config, {predict = predict})
    return recorded[1].cfg.batch_size
  end
  T.eq(bs({batch_size_eval = 3, input = {batch_size = 5}, batch_size = 7}), 3)
  T.eq(bs({input = {batch_size = 5}, batch_size = 7}), 5)
  T.eq(bs({batch_size = 7}), 7)
  T.eq(bs({}), nil)
  T.eq(#evaluators.from_config({}, {predict = predict}), 0)   -- no evals
end)

T.test("from_config: errors name the eval and list what exists", function()
  local msg = T.raises(function()
    evaluators.from_config({evals = {val = {type = "recorder", pred = "nope"}}},
                           {predict = predict, loss = loss_fn})
  end, "evals.val: unknown predict_fn 'nope'. Available predict_fns are:\nloss\npredict")
  T.raises(function()
    evaluators.from_config({evals = {val = {type = "no_such_type"}}}, {predict = predict})
  end, "unknown evaluator type 'no_such_type'; the types are: classification, fewshot_lsr, mean, "
    .. "proj.paligemma.perplexity, proj.paligemma.transfers.vqa, recorder")
  T.raises(function()
    evaluators.from_config({evals = {val = {type = "classfication"}}}, {predict = predict})
  end, "unknown evaluator type 'classfication' (did you mean 'classification'?)")
  T.raises(function()
    evaluators.from_config({input = {batch_size = 2}, evals = {val = {
      type = "classification", data = {name = "bv:jsonl", fname = "x"}, loss_name = "l2"}}},
      {predict = predict})
  end, "loss_name must be one of sigmoid_xent, softmax_xent, got l2")
  T.raises(function()
    evaluators.from_config({input = {batch_size = 2}, evals = {val = {
      type = "classification", data = {name = "bv:jsonl", fname = "x"},
      loss_name = "softmax_xent", pp_fn = "keep('x')", colour = "red", size = 3}}},
      {predict = predict})
  end, "evals.val (type classification): ")
  T.raises(function()
    evaluators.from_config({input = {batch_size = 2}, evals = {val = {
      type = "mean", data = {name = "bv:jsonl", fname = "x"}, colour = "red", size = 3}}},
      {predict = predict})
  end, "unexpected config keys: colour, size")
  T.raises(function()
    evaluators.from_config(
      {evals = {val = {type = "mean", data = {name = "bv:jsonl", fname = "x"}}}},
      {predict = predict})
  end, "batch_size must be a positive integer")
  T.raises(function() evaluators.register("bad", {}) end, "new(predict_fn, cfg)")
  -- A registered type is found by its name.
  T.eq(evaluators.get("classification"), require("bv.evaluators.classification"))
end)

-- Classification data: a label vector and the class the fake model "guesses" (0-based).
-- 7 rows in batches of 4: the second batch has one padding row.
local L = math.log(math.exp(2) + 2)   -- logits are 2 at the guess and 0 elsewhere
local cls_rows = {
  {labels = {1.0, 0.0, 0.0}, guess = 0},  -- right: softmax loss L - 2
  {labels = {0.0, 1.0, 0.0}, guess = 1},  -- right: L - 2
  {labels = {0.0, 0.0, 1.0}, guess = 0},  -- wrong: L
  {labels = {0.0, 0.0, 0.0}, guess = 2},  -- all-zero labels: ignored
  {labels = {0.5, 0.5, 0.0}, guess = 1},  -- soft: weight max(labels) = 0.5, credit 0.5 * 0.5,
                                          -- loss 0.5 * (L - 1)
  {labels = {0.0, 1.0, 0.0}, guess = 2},  -- wrong: L
  {labels = {1.0, 0.0, 0.0}, guess = 0},  -- right: L - 2
}

local function fake_logits(params, batch)
  T.eq(batch.labels, nil, "the labels are not given to predict_fn")
  T.eq(batch._mask, nil, "nor is _mask")
  T.eq(params, "params")
  local classes = bv.arange(0, 3):unsqueeze(1)
  return batch.guess:unsqueeze(2):eq(classes):to("float32") * 2, {extra = true}
end

T.test("classification: prec@1 and softmax loss by hand, padding and zero labels ignored",
       function()
  local cls_data = write_jsonl("cls.jsonl", cls_rows)
  local evs = evaluators.from_config(
    {input = {batch_size = 4}, evals = {val = {type = "classification", data = cls_data,
     pp = 'keep("labels", "guess")', loss_name = "softmax_xent", workers = 1}}},
    {predict = fake_logits})
  local e = evs[1].evaluator
  local res = e:run("params")
  T.eq({res[1][1], res[2][1]}, {"prec@1", "loss"})
  -- nseen = 5 one-hot rows + 0.5 for the soft one; the padding row and the zero row add 0.
  T.near(res[1][2], 3.25 / 5.5, 1e-6)
  T.near(res[2][2], (3 * (L - 2) + L + 0.5 * (L - 1) + L) / 5.5, 1e-5)
  -- A second run rebuilds the pipeline and gives the same numbers.
  local again = e:run("params")
  T.eq(again, res)
end)

T.test("classification: outfile holds {id, label, prediction} of the real rows", function()
  local cls_data = write_jsonl("cls_out.jsonl", cls_rows)
  local out = tmp .. "/cls_{step}.json"
  local function make(pp)
    return require("bv.evaluators.classification").new(fake_logits, {data = cls_data, pp = pp,
      batch_size = 4, loss_name = "softmax_xent", workers = 1, outfile = out})
  end
  make('keep("labels", "guess", "id")'):run("params", {workdir = tmp, step = 3})
  local rows = json.decode(bv.fs.read_file(tmp .. "/cls_3.json"))
  T.eq(#rows, #cls_rows)  -- the padding row is left out
  T.eq(rows[1], {id = "0", label = 0, prediction = 0})
  T.eq(rows[3], {id = "2", label = 2, prediction = 0})
  T.raises(function() make('keep("labels", "guess")'):run("params", {workdir = tmp, step = 4}) end,
           'outfile needs each example\'s id: keep "id" in the eval pp')
end)

T.test("classification: sigmoid loss, label_key and pp_fn", function()
  local rows = {}
  for i, r in ipairs(cls_rows) do rows[i] = {y = r.labels, guess = r.guess} end
  local cls_data = write_jsonl("cls_y.jsonl", rows)
  local e = require("bv.evaluators.classification").new(function(params, batch)
    T.eq(batch.y, nil)
    local classes = bv.arange(0, 3):unsqueeze(1)
    return batch.guess:unsqueeze(2):eq(classes):to("float32") * 2
  end, {data = cls_data, pp_fn = "keep('y', 'guess')", batch_size = 3, label_key = "y",
        loss_name = "sigmoid_xent", workers = 2})
  local res = e:run("params")
  -- Per class: -log(sigmoid(2)) = log(1 + e^-2) for a hit, log(1 + e^2) for a false alarm,
  -- log 2 for a logit of 0 whatever the label.
  local hit, alarm, l2 = math.log(1 + math.exp(-2)), math.log(1 + math.exp(2)), math.log(2)
  local right, wrong = hit + 2 * l2, alarm + 2 * l2
  local soft = 2 * l2 + 0.5 * (hit + alarm)
  T.near(res[1][2], 3.25 / 5.5, 1e-6)
  T.near(res[2][2], (3 * right + wrong + 0.5 * soft + wrong) / 5.5, 1e-5)
end)

T.test("losses: per-example and reduced values, shapes checked", function()
  local logits = bv.tensor({{2.0, 0.0, 0.0}, {0.0, 0.0, 0.0}})
  local labels = bv.tensor({{1, 0, 0}, {0, 0, 1}})
  local per = losses.softmax_xent({logits = logits, labels = labels, reduction = false})
  T.near(per[1]:item(), L - 2, 1e-6)
  T.near(per[2]:item(), math.log(3), 1e-6)
  T.near(losses.softmax_xent({logits = logits, labels = labels}):item(),
         (L - 2 + math.log(3)) / 2, 1e-6)
  -- Stable for large logits: log_sigmoid(-100) = -100 (minus a negligible term), not -inf.
  T.near(losses.log_sigmoid(bv.tensor({-100.0}))[1]:item(), -100, 1e-4)
  T.near(losses.sigmoid_xent({logits = bv.tensor({{100.0}}), labels = bv.tensor({{0.0}})}):item(),
         100, 1e-3)
  T.raises(function() losses.softmax_xent({logits = logits, labels = bv.zeros({2, 4})}) end,
           "logits [2, 3] and labels [2, 4] differ in shape")
end)

T.test("mean: masked means per key, sorted; NaN in padding rows doesn't matter", function()
  local rows = {}
  for i = 1, 5 do rows[i] = {x = i} end
  local d = write_jsonl("mean.jsonl", rows)
  local calls = 0
  local function per_example(params, batch)
    calls = calls + 1
    T.truthy(batch._mask ~= nil, "mean's predict_fn sees _mask")
    local x = batch.x:to("float64")
    local mask = batch._mask:totable()
    local nanpad = {}
    for i, real in ipairs(mask) do nanpad[i] = real and 1.0 or 0 / 0 end
    return {sq = x * x, b_x = x + params, nanpad = bv.tensor(nanpad)}
  end
  local evs = evaluators.from_config(
    {input = {batch_size = 4}, evals = {m = {type = "mean", pred = "per_example", data = d,
                                             workers = 1}}},
    {per_example = per_example})
  local res = evs[1].evaluator:run(10)
  T.eq(calls, 2)                                       -- 5 rows in 2 batches (3 padding rows)
  T.eq(res, {{"b_x", 13.0}, {"nanpad", 1.0}, {"sq", 11.0}})  -- (1+4+9+16+25)/5 = 11
  -- Shapes must be per-example.
  local bad = require("bv.evaluators.mean").new(function(_, batch)
    return {v = batch.x:unsqueeze(2)}
  end, {data = d, batch_size = 4, workers = 1})
  T.raises(function() bad:run(0) end, "expected per-example metrics of shape [4], got 'v' [4, 1]")
end)

-- fewshot_lsr ---------------------------------------------------------------------------------

local fewshot = require "bv.evaluators.fewshot_lsr"

local function max_diff(a, b) return (a - b):abs():max():item() end

T.test("fewshot_lsr: the primal and dual ridge forms agree and solve the normal equations",
       function()
  local r = bv.rng(3)
  local x, y = bv.randn({5, 4}, r):to("float64"), bv.randn({5, 2}, r):to("float64")
  local wp, wd = fewshot.ridge(x, y, 0.5, "primal"), fewshot.ridge(x, y, 0.5, "dual")
  T.eq(wp:shape(), {4, 2})
  T.truthy(max_diff(wp, wd) < 1e-10, "primal and dual differ by " .. max_diff(wp, wd))
  local xt = x:transpose(1, 2)
  local lhs = xt:matmul(x):matmul(wp) + wp * 0.5
  T.truthy(max_diff(lhs, xt:matmul(y)) < 1e-10, "(XtX + l2 I) W = XtY")
  -- By hand: x = (1, 2), y = (1, 1), l2 = 1: w = (1 + 2) / (1 + 4 + 1).
  local x1, y1 = bv.tensor({{1.0}, {2.0}}):to("float64"), bv.tensor({{1.0}, {1.0}}):to("float64")
  T.near(fewshot.ridge(x1, y1, 1.0):item(), 0.5, 1e-12)
  -- Systems above 48 unknowns are solved by blocks (Schur complements): N = 120, D = 100.
  local xb, yb = bv.randn({120, 100}, r):to("float64"), bv.randn({120, 3}, r):to("float64")
  local bp, bd = fewshot.ridge(xb, yb, 2.0, "primal"), fewshot.ridge(xb, yb, 2.0, "dual")
  T.truthy(max_diff(bp, bd) < 1e-9, "block primal and dual differ by " .. max_diff(bp, bd))
  local xbt = xb:transpose(1, 2)
  local resid = max_diff(xbt:matmul(xb):matmul(bp) + bp * 2.0, xbt:matmul(yb))
  T.truthy(resid < 1e-9, "block solve residual " .. resid)
end)

-- A toy data set with 6 features of different scales and 3 classes: a one-feature signal plus
-- cosine "noise". Reference accuracies from big_vision's algorithm (whitening, bias 100,
-- 2*onehot-1, eigh ridge) in numpy float64 on the same float32-rounded features: all 24
-- training examples with l2 = 1024 -> 0.6 (9 of 15; 0.733 without whitening); the first 6
-- examples (dual form, N < D) with l2 = 1 -> 11/15 (1.0 without whitening).
local function toy_features(i, c)
  local f = {}
  for j = 1, 6 do
    f[j] = (math.cos(1.7 * i + 0.9 * j * j) + (j == c + 1 and 1.0 or 0.0)) * j * j + 10 * j
  end
  return f
end
local toy_train, toy_test = {}, {}
for i = 1, 24 do toy_train[i] = {f = toy_features(i, i % 3), label = i % 3} end
for i = 1, 15 do toy_test[i] = {f = toy_features(100 + i, i % 3), label = i % 3} end

local function as_tensors(rows)
  local fs, ls = {}, {}
  for i, r in ipairs(rows) do fs[i], ls[i] = r.f, r.label end
  return bv.tensor(fs):to("float32"):to("float64"), ls
end

T.test("fewshot_lsr: accuracies match big_vision's eigh computation", function()
  local x, y = as_tensors(toy_train)
  local xt, yt = as_tensors(toy_test)
  T.near(fewshot.fewshot_accuracy(x, y, 3, xt, yt, 1024.0), 0.6, 1e-12)
  local first = x[{{1, 6}}]
  T.near(fewshot.fewshot_accuracy(first, {table.unpack(y, 1, 6)}, 3, xt, yt, 1.0), 11 / 15, 1e-12)
end)

T.test("fewshot_lsr: end to end from a config, names, seeds and display_first", function()
  local train = write_jsonl("fs_train.jsonl", toy_train)
  local test = write_jsonl("fs_test.jsonl", toy_test)
  local calls = 0
  local function predict_fn(params, batch)
    calls = calls + 1
    T.eq(batch.label, nil, "labels are not given to predict_fn")
    return bv.zeros({batch.f:shape()[1], 3}), {pre_logits = batch.f}
  end
  local evs = evaluators.from_config({input = {batch_size = 5}, evals = {fewshot = {
    type = "fewshot_lsr", prefix = "", datasets = {toy = {train = train, test = test}},
    shots = {1, 8}, l2_reg = 1024.0, num_seeds = 2, representation_layer = "pre_logits",
    pp_train = "keep('f', 'label')", pp_eval = "keep('f', 'label')",
    display_first = {{"toy", 8}}, workers = 1}}}, {predict = predict_fn})
  T.eq(evs[1].prefix, "")
  local res = evs[1].evaluator:run("params")
  T.eq(calls, 5 + 3)                                    -- 24 and 15 examples in batches of 5
  local names = {}
  for i, kv in ipairs(res) do names[i] = kv[1] end
  T.eq(names, {"z/toy_1shot-seed-0", "a/toy_8shot-seed-0",
               "z/toy_1shot-seed-1", "a/toy_8shot-seed-1"})
  -- 8 shots take all 8 examples of every class, whatever the seed.
  T.near(res[2][2], 0.6, 1e-12)
  T.near(res[4][2], 0.6, 1e-12)
  for _, kv in ipairs(res) do T.truthy(kv[2] >= 0 and kv[2] <= 1, kv[1]) end
  T.eq(evs[1].evaluator:run("params"), res, "the same numbers on a second run")
  T.raises(function()
    fewshot.new(predict_fn, {datasets = {toy = {train = train}}, shots = {1}, l2_reg = 1,
                             pp_train = "", pp_eval = "", batch_size = 2})
  end, "datasets.toy needs train and test data configs")
  T.raises(function()
    fewshot.new(predict_fn, {datasets = {toy = {train = train, test = test}}, shots = {1},
                             l2_reg = 1, pp_train = "", pp_eval = "", batch_size = 2, typo = 1})
  end, "unexpected config keys: typo")
end)

T.run()
