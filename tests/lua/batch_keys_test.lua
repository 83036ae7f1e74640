-- A batch without the key the loss, the model or an evaluator needs is an error that lists the
-- batch's keys, names the one wanted and says how to make it in the pp; the trainers say it at
-- their first batch, before building the model (a step does no extra work).
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp .. "/data")

local lines = {}
for i = 1, 8 do
  local file = string.format("im_%d.png", i)
  bv.image.write_png(bv.zeros({8, 8, 3}, "uint8"), tmp .. "/data/" .. file)
  lines[i] = json.encode({image = file, label = (i - 1) % 3, id = tostring(i)})
end
bv.fs.write_file(tmp .. "/data/train.jsonl", table.concat(lines, "\n"))
local data = {name = "bv:jsonl", fname = tmp .. "/data/train.jsonl",
              fopen_keys = {image = tmp .. "/data"}}

local function config(pp)
  return {seed = 0, total_steps = 2, num_classes = 3, loss = "softmax_xent",
          input = {data = data, batch_size = 4, pp = pp},
          model_name = "vit", model = {variant = "mu/8", depth = 1},
          optax_name = "scale_by_adam", lr = 0.01, log_training_steps = 1}
end

T.test("classification trainer: keep('image', 'label') names the keys and the onehot fix", function()
  local trainer = require "bv.trainers.classification"
  local run = {}
  local msg = T.raises(function()
    trainer(config('decode|value_range(-1, 1)|onehot(3, key="label")|keep("image", "label")'),
            tmp .. "/w1", run)
  end, "classification trainer: the training batch has keys {image, label}, but the loss "
       .. "(softmax_xent) wants 'labels': make one-hot labels in the train pp: "
       .. 'onehot(3, key="label", key_result="labels")|keep("image", "labels")')
  T.truthy(not msg:find("bad argument"), msg)
  -- Said at the first batch: no model was built (resume_or_init sets run.state), no step ran.
  T.eq(run.state, nil, "run.state (the model was built before the check)")
end)

T.test("classification trainer: a batch without image says the model wants it", function()
  local trainer = require "bv.trainers.classification"
  T.raises(function()
    trainer(config('decode|onehot(3, key="label", key_result="labels")|copy(inkey="image", '
                   .. 'outkey="img")|keep("img", "labels")'), tmp .. "/w2", {})
  end, "the training batch has keys {img, labels}, but the model wants 'image': keep \"image\"")
end)

T.test("paligemma trainer: a train pp without combine_and_keep_train names it", function()
  local trainer = require "bv.trainers.proj.paligemma.train"
  local c = config('decode|keep("image", "label")')
  c.model_name, c.model = nil, nil
  T.raises(function() trainer(c, tmp .. "/w3", {}) end,
           "paligemma trainer: the training batch has keys {image, label}, but the loss wants "
           .. "'text': end the train pp with bv.paligemma.combine_and_keep_train{text_len = N}")
end)

T.test("model:loss_and_grads lists the batch's keys", function()
  local m = bv.models.build("vit", {variant = "mu/8", depth = 1, num_classes = 3,
                                    image_size = {8, 8}})
  local p = m:init(0)
  T.raises(function()
    m:loss_and_grads(p, {image = bv.zeros({2, 8, 8, 3}), label = bv.zeros({2}, "int64")})
  end, "loss_and_grads: the batch has keys {image, label}, but the loss wants 'labels': "
       .. 'make one-hot labels in the pp: onehot(num_classes, key="label", key_result="labels")')
  T.raises(function()
    m:loss_and_grads(p, {labels = bv.zeros({2, 3}), img = bv.zeros({2, 8, 8, 3})})
  end, "loss_and_grads: the batch has keys {img, labels}, but the model wants 'image'")
end)

T.test("classification evaluator: the eval batch's keys and the onehot fix", function()
  local evaluators = require "bv.evaluators"
  local evals = evaluators.from_config({input = {batch_size = 4}, evals = {val = {
    type = "classification", data = data, loss_name = "softmax_xent",
    pp = 'decode|keep("image", "label")'}}}, {predict = function() return bv.zeros({4, 3}) end})
  T.raises(function() evals[1].evaluator:run({}) end,
           "classification: the batch has keys {image, label}, but label_key wants 'labels': "
           .. 'make one-hot labels in the eval pp: onehot(num_classes, key="label", '
           .. 'key_result="labels")')
end)

T.test("a key that is not a tensor is named with its kind", function()
  T.raises(function()
    bv.data.require_key({labels = {"a", "b"}, image = bv.zeros({2})}, "labels",
                        {who = "x", wants = "the loss"})
  end, "x: the loss wants 'labels' as a tensor, but the batch's 'labels' is a list")
end)

T.test("paligemma predict functions: an eval batch without text names the fix", function()
  local fns = require("bv.trainers.proj.paligemma.predict_fns").get_all({})
  T.raises(function() fns.logits({}, {image = bv.zeros({1, 8, 8, 3}), label = {"1"}}) end,
           "logits: the batch has keys {image, label}, but the model wants 'text': end the "
           .. "evaluator's pp with bv.paligemma.combine_and_keep_eval")
  T.raises(function() fns.decode({}, {text = bv.zeros({1, 4})}, {max_decode_len = 2}) end,
           "decode: the batch has keys {text}, but the model wants 'image'")
end)

T.run()
