-- bv.tfds and bv.tfds_splits against what the real tensorflow-datasets computes and reads:
-- tests/data/tfds/ (lines_tfds, prepared by TFDS) and its expected.json, both written by
-- scripts/make_tfds_fixture.py. No TensorFlow is needed here.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local tfds = require "bv.tfds"
local S = require "bv.tfds_splits"

local DIR = "tests/data/tfds"
local expected = json.decode(bv.fs.read_file(DIR .. "/expected.json"))
local null = bv.null

local function data(split, extra)
  local d = {name = "lines_tfds", split = split, data_dir = DIR}
  for k, v in pairs(extra or {}) do d[k] = v end
  return d
end

-- The splits of a case in the dataset's order (train, validation, test: as the script wrote).
local ORDER = {"train", "validation", "test"}
local function splits_list(obj)
  local out = {}
  for _, name in ipairs(ORDER) do
    if obj[name] then out[#out + 1] = {name = name, shard_lengths = obj[name]} end
  end
  return out
end

-- JSON null -> nil, so results compare with S.absolute's.
local function want_abs(result)
  local out = {}
  for i, a in ipairs(result) do
    out[i] = {a[1], a[2] ~= null and a[2] or nil, a[3] ~= null and a[3] or nil}
  end
  return out
end

local function shards_str(obj)
  local parts = {}
  for _, name in ipairs(ORDER) do
    if obj[name] then parts[#parts + 1] = name .. "=" .. table.concat(obj[name], ",") end
  end
  return table.concat(parts, " ")
end

-- One case: TFDS's result (a list of instructions or {error}) against ours.
local function check(what, want, fn)
  local ok, got = pcall(fn)
  if want.error then
    if ok then error(string.format("%s: TFDS refuses it (%s), bvlua gives %s", what, want.error,
                                   T.dump(got)), 0) end
    if not tostring(got):find("tfds: ", 1, true) then
      error(string.format("%s: the error does not say tfds: %s", what, tostring(got)), 0)
    end
    return 1
  end
  if not ok then error(string.format("%s: TFDS gives %s, bvlua fails: %s", what, T.dump(want),
                                     tostring(got)), 0) end
  return got
end

T.test("split arithmetic: every expression and split size as TFDS computes it", function()
  local n = 0
  for _, set in ipairs(expected.absolute) do
    local splits = splits_list(set.splits)
    for rounding, cases in pairs({closest = set.closest,
                                  pct1_dropremainder = set.pct1_dropremainder}) do
      for expr, want in pairs(cases) do
        local what = string.format("'%s' (%s) over %s", expr, rounding, shards_str(set.splits))
        local got = check(what, want, function()
          return S.absolute(expr, splits, {rounding = rounding})
        end)
        if not want.error then T.eq(got, want_abs(want), what) end
        n = n + 1
      end
    end
  end
  T.truthy(n > 500, "the cases: " .. n)
end)

T.test("even_splits: every part as tfds.even_splits computes it", function()
  local n = 0
  for _, set in ipairs(expected.even_absolute) do
    local splits = splits_list(set.splits)
    for key, parts in pairs(set.cases) do
      local expr, count, drop = key:match("^(.*)|(%d+)|(%a+)$")
      local even = S.even_splits(expr, tonumber(count), drop == "true")
      T.eq(#even, #parts, key)
      for i, want in ipairs(parts) do
        local what = string.format("even_splits('%s', %s, drop_remainder=%s)[%d] over %s", expr,
                                   count, drop, i - 1, shards_str(set.splits))
        local got = check(what, want, function() return S.absolute(even[i], splits) end)
        if not want.error then T.eq(got, want_abs(want), what) end
        n = n + 1
      end
    end
  end
  T.truthy(n > 1000, "the cases: " .. n)
end)

T.test("interleave: TFDS's read order over file instructions", function()
  for k, case in ipairs(expected.interleave) do
    local instr = {}
    for i, f in ipairs(case.files) do
      instr[i] = {skip = f[1], take = f[2], length = case.lengths[i]}
    end
    local got = {}
    for _, b in ipairs(S.interleave(instr)) do
      local stop = b.take == -1 and case.lengths[b.i] or b.skip + b.take
      for r = b.skip, stop - 1 do got[#got + 1] = {b.i - 1, r} end
    end
    T.eq(got, case.order, "interleave case " .. k)
  end
end)

T.test("file instructions: TFDS's skip/take per shard", function()
  local splits = {{name = "train", shard_lengths = {20, 0, 20}}}
  local fi = S.file_instructions(S.absolute("train[15:25]", splits), splits)
  T.eq(fi, {{split = "train", shard = 1, skip = 15, take = -1, length = 20},
            {split = "train", shard = 3, skip = 0, take = 5, length = 20}})
  fi = S.file_instructions(S.absolute("train[20:]", splits), splits)
  T.eq(fi, {{split = "train", shard = 3, skip = 0, take = -1, length = 20}})
  T.eq(S.file_instructions(S.absolute("train[5:5]", splits), splits), {})
  local pct1 = {{name = "train", shard_lengths = {100}}}
  T.raises(function()
    S.file_instructions(S.absolute("train[:12.5%]", pct1, {rounding = "pct1_dropremainder"}), pct1)
  end, "is not a whole number of examples")
end)

T.test("source config: shards, skip and take in TFDS's order; counts", function()
  local f0 = DIR .. "/lines_tfds/1.0.0/lines_tfds-train.tfrecord-00000-of-00002"
  local f1 = DIR .. "/lines_tfds/1.0.0/lines_tfds-train.tfrecord-00001-of-00002"
  local cfg, n, total = tfds.source_config(data("train"))
  T.eq(cfg, {name = "bv:tfrecord", shards = {{file = f0, skip = 0, take = 16},
    {file = f1, skip = 0, take = 16}, {file = f0, skip = 16, take = -1},
    {file = f1, skip = 16, take = -1}}})
  T.eq({n, total}, {40, 40})
  cfg, n, total = tfds.source_config(data("train[15:25]"))
  T.eq(cfg.shards, {{file = f0, skip = 15, take = -1}, {file = f1, skip = 0, take = 5}})
  T.eq({n, total}, {10, 10})
  -- process 2 of 3 of train[:50%] (20 examples: 7, 7, 6)
  cfg, n, total = tfds.source_config(data("train[:50%]"), {rank = 1, world = 3})
  T.eq(cfg.shards, {{file = f0, skip = 7, take = 7}})
  T.eq({n, total}, {7, 20})
  T.eq(tfds.num_examples(data("train+validation")), 50)
  T.eq(tfds.num_examples(data("train[:99%]")), 40)
  T.raises(function() tfds.source_config(data("train[99%:]")) end, "selects no examples")
  T.raises(function() tfds.source_config(data("validation[:1]"), {rank = 1, world = 2}) end,
           "validation[:1] (part 2 of 2) selects no examples")
end)

T.test("dataset: name, version, splits, features and label names as TFDS wrote them", function()
  local ds = tfds.resolve(data("train"))
  T.eq({ds.name, ds.version, ds.file_format}, {expected.dataset.name, expected.dataset.version,
                                               "tfrecord"})
  for _, s in ipairs(ds.splits) do
    T.eq(s.shard_lengths, expected.dataset.splits[s.name], s.name)
  end
  T.eq(require("bv.config_keys").scope("data:lines_tfds").by_name.split.type, "string")
  T.eq(#ds.splits, 3)
  T.eq(tfds.label_names(data()), expected.dataset.label_names)
  local f = tfds.features(data())
  T.eq({f.image.kind, f.image.encoding, f.label.kind, f.label.num_classes, f.id.kind, f.id.dtype},
       {"image", "png", "class_label", 3, "tensor", "int64"})
  T.raises(function() tfds.label_names(data(), "labl") end,
           "no class label feature 'labl' (did you mean 'label'?); its class labels: label")
  T.raises(function() tfds.label_names(data(), "id") end, "no class label feature 'id'")
end)

-- A data dir in a temporary directory with copies of the fixture's dataset_info.json.
local function fake_dir(layout)
  local root = os.tmpname()
  os.remove(root)
  local info = bv.fs.read_file(DIR .. "/lines_tfds/1.0.0/dataset_info.json")
  for _, path in ipairs(layout) do
    bv.fs.mkdirs(root .. "/" .. path)
    bv.fs.write_file(root .. "/" .. path .. "/dataset_info.json", info)
  end
  return root
end

T.test("versions: the newest prepared in semantic order, or the one named", function()
  local root = fake_dir({"lines_tfds/1.0.0", "lines_tfds/1.9.0", "lines_tfds/1.10.0",
                         "lines_tfds/2.0.1"})
  bv.fs.mkdirs(root .. "/lines_tfds/3.0.0")  -- not prepared: no dataset_info.json
  bv.fs.mkdirs(root .. "/lines_tfds/incomplete.ABC_4.0.0")
  local function version(name) return tfds.resolve({name = name, data_dir = root}).version end
  T.eq(version("lines_tfds"), "2.0.1")
  T.eq(version("lines_tfds:1.9.0"), "1.9.0")
  T.eq(version("lines_tfds:1.*.*"), "1.10.0")
  T.eq(version("lines_tfds:*.*.*"), "2.0.1")
  T.raises(function() version("lines_tfds:3.0.0") end,
           "no prepared version 3.0.0 in " .. root .. "/lines_tfds; prepared: 2.0.1, 1.10.0, "
           .. "1.9.0, 1.0.0")
  T.raises(function() version("lines_tfds:1.0") end, "bad dataset name 'lines_tfds:1.0'")
  T.raises(function() version("lines_tfds/x=1") end, "builder arguments")
  T.raises(function() version("ns:lines_tfds") end, "community namespaces")
end)

T.test("names: missing data dir, dataset, config; configs; array_record; bad info", function()
  T.raises(function() tfds.resolve({name = "lines_tfds", data_dir = "no/such/dir"}) end,
           "no TFDS data directory no/such/dir (data_dir); a relative path is relative to")
  T.raises(function() tfds.resolve({name = "lines_tfd", data_dir = DIR}) end,
           "no dataset 'lines_tfd' in " .. DIR .. " (data_dir) (did you mean 'lines_tfds'?); "
           .. "it has: lines_tfds")
  local root = fake_dir({"cfgd/small/1.0.0", "cfgd/big/1.0.0", "plain/1.0.0"})
  T.eq(tfds.resolve({name = "cfgd/small", data_dir = root}).config, "small")
  T.raises(function() tfds.resolve({name = "cfgd", data_dir = root}) end,
           "dataset 'cfgd' has configs (big, small): name one, e.g. name = \"cfgd/big\"")
  T.raises(function() tfds.resolve({name = "cfgd/smal", data_dir = root}) end,
           "no config 'smal' in " .. root .. " (data_dir) (did you mean 'small'?); its configs: "
           .. "big, small")
  T.raises(function() tfds.resolve({name = "plain/x", data_dir = root}) end, "its configs: none")
  -- fileFormat array_record: refused, naming the format
  local info = bv.fs.read_file(root .. "/plain/1.0.0/dataset_info.json")
  local ar = info:gsub('"fileFormat": "tfrecord"', '"fileFormat": "array_record"')
  T.truthy(ar ~= info, "the fixture's info names its file format")
  bv.fs.write_file(root .. "/plain/1.0.0/dataset_info.json", ar)
  T.raises(function() tfds.resolve({name = "plain", data_dir = root}) end,
           "is stored as array_record (" .. root .. "/plain/1.0.0/dataset_info.json's fileFormat), "
           .. "which bvlua does not read: only tfrecord is supported")
  bv.fs.write_file(root .. "/plain/1.0.0/dataset_info.json", "{not json")
  T.raises(function() tfds.resolve({name = "plain", data_dir = root}) end, "is not valid JSON")
  -- $TFDS_DATA_DIR is not set in tests: data_dir wins anyway
  T.eq(tfds.data_dir({data_dir = "x"}), "x")
  T.raises(function() tfds.resolve({name = "lines_tfds", data_dir = DIR, splt = "train"}) end,
           "unknown key splt (did you mean 'split'?) (a TFDS data config takes name, split and "
           .. "data_dir)")
end)

T.test("splits: unknown split, bad expressions, no split", function()
  T.raises(function() tfds.source_config(data("trainn")) end,
           "split 'trainn': unknown split 'trainn' (did you mean 'train'?); the dataset has: "
           .. "train, validation, test")
  T.raises(function() tfds.source_config(data("train[:101%]")) end, "in [-100, 100]")
  T.raises(function() tfds.source_config(data("train[5]")) end, "a single index needs shards")
  T.raises(function() tfds.source_config(data("train[:-1000]")) end,
           "the slice [:-1000] does not fit split 'train' of 40 examples")
  T.raises(function() tfds.source_config(data()) end, "needs a split")
  T.raises(function() tfds.source_config(data(7)) end, "a split must be a string")
end)

T.test("bv.data: a TFDS data config's mistakes name where it is", function()
  T.raises(function() bv.data.training({data = data("tran"), batch_size = 4}) end,
           "input.data: tfds: split 'tran': unknown split 'tran'")
  T.raises(function() bv.data.check_path(data("test", {name = "lines"}), "evals.val.data") end,
           "evals.val.data: tfds: no dataset 'lines'")
  T.raises(function() bv.data.inference({data = data("test", {splt = 1}), batch_size = 4}) end,
           "unknown key splt")
  bv.data.check_path(data("test"), "evals.val.data")  -- there: no error
end)

T.run()
