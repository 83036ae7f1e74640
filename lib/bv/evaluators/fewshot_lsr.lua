-- The `fewshot_lsr` evaluator (big_vision's evaluators/fewshot_lsr.py): few-shot linear
-- classification of the model's representation by closed-form ridge regression.
--
--   evals.fewshot = {
--     type = "fewshot_lsr", log_steps = 25000, prefix = "",
--     datasets = {pets = {train = {name = "bv:imagefolder", root = "pets/train"},
--                         test = {name = "bv:jsonl", fname = "pets/test.jsonl", ...},
--                         num_classes = 37}},               -- num_classes: optional
--     shots = {1, 5, 10, 25}, l2_reg = 2 ^ 10, num_seeds = 3,
--     pp_train = "decode|resize(256)|central_crop(224)|value_range(-1,1)|keep('image','label')",
--     pp_eval = (same), display_first = {{"pets", 10}}, representation_layer = "pre_logits",
--   }
--
-- Where big_vision names a TFDS data set and its splits, each data set here gives the data
-- configs of its train and test parts (any bv source); num_classes defaults to the largest
-- train label + 1 (labels are integer class ids in `label_key`).
--
-- For every seed (0 .. num_seeds-1) and data set (sorted by name; big_vision keeps the config's
-- order): the examples of each class c = 0..C-1 are shuffled with bv.rng(seed) (big_vision
-- draws numpy's default_rng(seed) permutations, so the chosen examples differ from its), and
-- for each entry of `shots` the first `shots` of every class form the training set. Features
-- are whitened with the training set's mean and std + 1e-5, a constant 100.0 is appended (a
-- nearly unregularised bias), targets are 2 * onehot - 1, and
--   W = (XᵀX + l2·I)⁻¹ XᵀY  when N >= D,   W = Xᵀ(XXᵀ + l2·I)⁻¹ Y  when D > N,
-- which is what big_vision computes through eigh. The metric is the test accuracy of
-- argmax(X_test W), named "{a/ or z/}{name}_{shots}shot-seed-{seed}" ("a/" for the
-- (name, shots) pairs in display_first). The linear algebra is float64 on the CPU.
--
-- Representations: predict_fn(params, batch) returns the representation first (and a table of
-- outputs last); with representation_layer, that table's entry (a "/"-separated path) is used
-- instead. They are computed once per data set per run.
local evaluators = require "bv.evaluators"

require("bv.config_keys").declare("evaluator:fewshot_lsr", {
  doc = "few-shot linear regression on the representation", include = {"evaluator"}, keys = {
  {"datasets", "table", nil, "name -> {train = data, test = data, num_classes = N}"},
  {"shots", "list", nil, "examples per class, e.g. {1, 5, 10, 25}"},
  {"l2_reg", "float", nil, "the ridge regularisation"},
  {"num_seeds", "int", 3, "draws of the training examples"},
  {"display_first", "list", {}, "{name, shots} pairs whose metric goes under a/"},
  {"representation_layer", "string", nil, "a path into the predict function's outputs"},
  {"label_key", "string", "label", "the batch key of integer labels"},
  {"mask_key", "string", "_mask", "the batch key of real rows"},
  {"pp_train", "string", nil, "the pp of train parts"},
  {"pp_eval", "string", nil, "the pp of test parts"},
  {"batch_size", "int", nil, "default: config.batch_size_eval, then config.input.batch_size"},
  {"workers", "int", nil, "data worker threads"},
  {"cache", "string", nil, "accepted, no effect"},
  {"prefetch", "int", nil, "accepted, no effect"},
  {"keep_on_cpu", "list", nil, "accepted, no effect"},
  {"warmup", "bool", nil, "accepted, no effect"},
}})

local M = {}

local BIAS_CONSTANT = 100.0

local Evaluator = {}
Evaluator.__index = Evaluator

local pop = evaluators.pop

function M.new(predict_fn, cfg)
  if type(predict_fn) ~= "function" then error("fewshot_lsr: predict_fn must be a function", 2) end
  cfg = evaluators.copy(cfg or {})
  local self = setmetatable({}, Evaluator)
  self.predict_fn = predict_fn
  self.datasets = pop(cfg, "datasets")
  self.shots = pop(cfg, "shots")
  self.l2_reg = pop(cfg, "l2_reg")
  self.display_first = pop(cfg, "display_first", {})
  self.representation_layer = pop(cfg, "representation_layer")
  self.num_seeds = pop(cfg, "num_seeds", 3)
  self.label_key = pop(cfg, "label_key", "label")
  self.mask_key = pop(cfg, "mask_key", "_mask")
  local pp_train, pp_eval = pop(cfg, "pp_train"), pop(cfg, "pp_eval")
  if cfg.data_dir ~= nil then
    error("fewshot_lsr: data_dir is TFDS's; give each data set's train and test data configs", 2)
  end
  if type(self.datasets) ~= "table" or next(self.datasets) == nil then
    error("fewshot_lsr: datasets must be a table of name -> {train = data, test = data}", 2)
  end
  if type(self.shots) ~= "table" or #self.shots == 0 then
    error("fewshot_lsr: shots must be a list of numbers of examples per class", 2)
  end
  for _, s in ipairs(self.shots) do
    if math.type(s) ~= "integer" or s < 1 then
      error("fewshot_lsr: shots must be positive integers", 2)
    end
  end
  if type(self.l2_reg) ~= "number" or self.l2_reg <= 0 then
    error("fewshot_lsr: l2_reg must be a positive number", 2)
  end
  if math.type(self.num_seeds) ~= "integer" or self.num_seeds < 0 then
    error("fewshot_lsr: num_seeds must be a non-negative integer", 2)
  end
  if type(pp_train) ~= "string" or type(pp_eval) ~= "string" then
    error("fewshot_lsr: pp_train and pp_eval must be pp strings", 2)
  end
  self.display = {}
  for _, pair in ipairs(self.display_first) do
    if type(pair) ~= "table" or type(pair[1]) ~= "string" or math.type(pair[2]) ~= "integer" then
      error("fewshot_lsr: display_first must be a list of {name, shots} pairs", 2)
    end
    self.display[pair[1] .. "\0" .. pair[2]] = true
  end
  -- One inference pipeline per data set and part, each checked like any evaluator's input.
  local shared = {}
  for _, k in ipairs({"batch_size", "workers", "_config_file", "_device", "_max_pixels", "cache",
                      "prefetch", "keep_on_cpu", "warmup"}) do
    shared[k] = pop(cfg, k)
  end
  local left = {}
  for k in pairs(cfg) do left[#left + 1] = tostring(k) end
  if #left > 0 then
    table.sort(left)
    error("fewshot_lsr: unexpected config keys: " .. table.concat(left, ", "), 2)
  end
  self.names, self.pipelines, self.num_classes = {}, {}, {}
  for name, ds in pairs(self.datasets) do
    if type(ds) ~= "table" or type(ds.train) ~= "table" or type(ds.test) ~= "table" then
      error(string.format("fewshot_lsr: datasets.%s needs train and test data configs", name), 2)
    end
    self.names[#self.names + 1] = name
    local parts = {}
    for part, pp in pairs({train = pp_train, test = pp_eval}) do
      local pcfg = evaluators.copy(shared)
      pcfg.data, pcfg.pp_fn = ds[part], pp
      parts[part] = evaluators.input_pipeline(pcfg, "fewshot_lsr datasets." .. name .. "." .. part)
    end
    self.pipelines[name] = parts
    self.num_classes[name] = ds.num_classes
  end
  table.sort(self.names)
  return self
end

-- out[path] for a "/"-separated path in a nested table (big_vision's tree_get).
local function tree_get(out, path)
  if type(out) == "table" and out[path] ~= nil then return out[path] end
  local node = out
  for part in path:gmatch("[^/]+") do
    if type(node) ~= "table" then node = nil break end
    node = node[part]
  end
  if node == nil then error("fewshot_lsr: predict_fn's outputs have no '" .. path .. "'", 0) end
  return node
end

-- Representations [N, D] (float64) and labels (a Lua list) of the real examples of one part.
function Evaluator:_representations(params, make_iter)
  local it <close> = make_iter()
  local reps, labels = {}, {}
  while true do
    local batch = it:next()
    if not batch then break end
    local y, mask = batch[self.label_key], batch[self.mask_key]
    if not bv.is_tensor(y) then
      bv.data.require_key(batch, self.label_key, {who = "fewshot_lsr", wants = "label_key",
                                                  fix = "keep the integer labels in its pp"})
    end
    batch[self.label_key], batch[self.mask_key] = nil, nil
    local results = table.pack(self.predict_fn(params, batch))
    local rep = results[1]
    if self.representation_layer then
      rep = tree_get(results[results.n], self.representation_layer)
    end
    if not bv.is_tensor(rep) or rep:dim() ~= 2 then
      error("fewshot_lsr: the representation must be a [batch, features] tensor", 0)
    end
    rep = rep:to("float64")
    local keep, all = mask:totable(), true
    local ys = y:totable()
    local rows = {}
    for i, real in ipairs(keep) do
      if real then
        rows[#rows + 1] = i
        local label = math.tointeger(ys[i])
        if not label then
          error("fewshot_lsr: labels must be integers, got " .. tostring(ys[i]), 0)
        end
        labels[#labels + 1] = label
      else
        all = false
      end
    end
    if all then
      reps[#reps + 1] = rep
    elseif #rows > 0 then
      local picked = {}
      for j, i in ipairs(rows) do picked[j] = rep[i] end
      reps[#reps + 1] = bv.stack(picked)
    end
  end
  if #reps == 0 then error("fewshot_lsr: a data set part has no examples", 0) end
  return bv.cat(reps, 1), labels
end

-- Solves A Z = B for a symmetric positive definite A [K, K] by Gauss-Jordan elimination on
-- [A | B] (no pivoting is needed: the ridge term keeps the pivots positive).
local function gauss_jordan(a, b)
  local k = a:shape()[1]
  local m = bv.cat({a, b}, 2)
  for i = 1, k do
    local row = m[i] / m[i][i]
    local col = m[{{}, {i}}]
    m = m - col * row:unsqueeze(1)
    m[i] = row
  end
  return m[{{}, {k + 1, m:shape()[2]}}]
end

-- The same by blocks, so that the work is matrix products: with A = [A11 A12; A21 A22],
-- the Schur complement S = A22 - A21 A11⁻¹ A12 is SPD too,
-- Z2 = S⁻¹ (B2 - A21 A11⁻¹ B1) and Z1 = A11⁻¹ B1 - A11⁻¹ A12 Z2. Small systems go to
-- Gauss-Jordan.
local function spd_solve(a, b)
  local k = a:shape()[1]
  if k <= 48 then return gauss_jordan(a, b) end
  local h, nb = k // 2, b:shape()[2]
  local a11, a12 = a[{{1, h}, {1, h}}], a[{{1, h}, {h + 1, k}}]
  local a21, a22 = a[{{h + 1, k}, {1, h}}], a[{{h + 1, k}, {h + 1, k}}]
  local b1, b2 = b[{{1, h}}], b[{{h + 1, k}}]
  local both = spd_solve(a11, bv.cat({a12, b1}, 2))        -- [A11⁻¹A12 | A11⁻¹B1]
  local inv_a12, inv_b1 = both[{{}, {1, k - h}}], both[{{}, {k - h + 1, k - h + nb}}]
  local z2 = spd_solve(a22 - a21:matmul(inv_a12), b2 - a21:matmul(inv_b1))
  local z1 = inv_b1 - inv_a12:matmul(z2)
  return bv.cat({z1, z2}, 1)
end
M._spd_solve = spd_solve

local function identity(k)
  local r = bv.arange(1, k + 1)
  return r:unsqueeze(2):eq(r:unsqueeze(1)):to("float64")
end

-- The ridge weights [D, C] for features x [N, D] and targets y [N, C] (both float64), in the
-- primal form when N >= D and the dual form otherwise (or as `form` says: "primal"/"dual").
function M.ridge(x, y, l2, form)
  local n, d = x:shape()[1], x:shape()[2]
  form = form or (n >= d and "primal" or "dual")
  local xt = x:transpose(1, 2)
  if form == "primal" then
    return spd_solve(xt:matmul(x) + identity(d) * l2, xt:matmul(y))
  end
  return xt:matmul(spd_solve(x:matmul(xt) + identity(n) * l2, y))
end

-- Whitening, the bias feature and the ±1 targets, then the test accuracy.
function M.fewshot_accuracy(x, y, num_classes, x_test, y_test, l2)
  local n = x:shape()[1]
  local mean = x:mean(1, true)
  local std = ((x - mean) * (x - mean)):mean(1, true):sqrt() + 1e-5
  local function features(z)
    z = (z - mean) / std
    return bv.cat({z, bv.full({z:shape()[1], 1}, BIAS_CONSTANT, "float64")}, 2)
  end
  local classes = bv.arange(0, num_classes):unsqueeze(1)
  local targets = bv.tensor(y):unsqueeze(2):eq(classes):to("float64") * 2 - 1
  assert(targets:shape()[1] == n)
  local w = M.ridge(features(x), targets, l2)
  local preds = features(x_test):matmul(w):argmax(2) - 1   -- 0-based classes
  local correct = preds:eq(bv.tensor(y_test)):to("float64"):mean()
  return correct:item()
end

local function shuffled(list, rng)
  local out = {}
  for i, v in ipairs(list) do out[i] = v end
  for i = #out, 2, -1 do
    local j = rng:integer(1, i)
    out[i], out[j] = out[j], out[i]
  end
  return out
end

-- {accuracy per entry of shots} for one data set and seed.
function Evaluator:_dataset(name, seed, cache)
  local r = cache[name]
  local by_class = {}
  for c = 0, r.num_classes - 1 do by_class[c] = {} end
  for i, label in ipairs(r.labels_train) do
    if label < 0 or label >= r.num_classes then
      error(string.format("fewshot_lsr: datasets.%s: label %d outside 0..%d", name, label,
                          r.num_classes - 1), 0)
    end
    local list = by_class[label]
    list[#list + 1] = i
  end
  local rng = bv.rng(seed)
  for c = 0, r.num_classes - 1 do by_class[c] = shuffled(by_class[c], rng) end
  local accs = {}
  for si, shots in ipairs(self.shots) do
    local rows, ys = {}, {}
    for c = 0, r.num_classes - 1 do
      for j = 1, math.min(shots, #by_class[c]) do
        local i = by_class[c][j]
        rows[#rows + 1] = r.train[i]
        ys[#ys + 1] = r.labels_train[i]
      end
    end
    accs[si] = M.fewshot_accuracy(bv.stack(rows), ys, r.num_classes, r.test, r.labels_test,
                                  self.l2_reg)
  end
  return accs
end

-- Returns {{"a/pets_10shot-seed-0", acc}, ...} for every seed, data set and shots.
function Evaluator:run(params)
  local cache = {}
  for _, name in ipairs(self.names) do
    local p = self.pipelines[name]
    local train, labels_train = self:_representations(params, p.train)
    local test, labels_test = self:_representations(params, p.test)
    local num_classes = self.num_classes[name]
    if num_classes == nil then
      num_classes = 0
      for _, l in ipairs(labels_train) do num_classes = math.max(num_classes, l + 1) end
    end
    cache[name] = {train = train, labels_train = labels_train, test = test,
                   labels_test = labels_test, num_classes = num_classes}
  end
  local results = {}
  for seed = 0, self.num_seeds - 1 do
    for _, name in ipairs(self.names) do
      for si, acc in ipairs(self:_dataset(name, seed, cache)) do
        local shots = self.shots[si]
        local prefix = self.display[name .. "\0" .. shots] and "a/" or "z/"
        local key = string.format("%s%s_%dshot-seed-%d", prefix, name, shots, seed)
        results[#results + 1] = {key, acc}
      end
    end
  end
  return results
end

return M
