-- bvlua mistakes: the tutorial's picture of mistakes. From an evaluator's outfile (the vqa one's
-- JSON list of {question_id, answer, gts}, or the classification one's {id, label, prediction})
-- and the data it evaluated (a JSON-L file, or a prepared TFDS split read as the training
-- pipeline reads it, bv.tfds), a contact sheet of randomly chosen wrong answers, each image
-- titled "Pred: x   GT: y" (a TFDS ClassLabel's names for the classification outfile's
-- classes). An outfile whose examples or labels are not the data's (another split) is refused
-- rather than drawn under wrong titles.
local cli = require "bv.commands.cli"
local json = require "bv.json"

local M = {}

M.USAGE = [==[
usage: bvlua mistakes OUTFILE.json DATA [-o FILE.png] [--n N] [--seed S] [--key KEY]
                      [--label KEY] [--data-dir DIR]

OUTFILE.json: what the vqa evaluator wrote (e.g. runs/pg/vqa_eval_120.json), or the
classification evaluator with an outfile (runs/resnet/eval_acc_400.json). DATA: the split it
evaluated, either
  DATA.jsonl   a JSON-L file; an example's id is its "id" field, else its 0-based line number
               (as the bv:jsonl source numbers them), and its picture the file named by --key
               relative to the data file's directory; or
  tfds:NAME[/CONFIG][:VERSION]:SPLIT
               a prepared TFDS split, as a config's data = {name =, split =} names it
               (tfds:imagenet2012:validation, tfds:lines_tfds:train[80%:]), read from --data-dir
               (else $TFDS_DATA_DIR, else ~/tensorflow_datasets) in the order the evaluator reads
               it; an example's id is its "id" feature, else its 0-based index in the split, and
               its picture the image feature --key. When the label is a ClassLabel with names,
               the classification outfile's classes are titled with them.
The outfile must answer the data's examples in order (all of them, or its first N when the
evaluation had a stop) with the data's labels (the classification label is the data's --label;
vqa's gts are its "answers", else "answer", else --label), or it is refused as another split's.
An empty answer is shown as "".

options:
  -o FILE         the contact sheet to write (default mistakes.png)
  --n N           how many mistakes, chosen at random (default 8)
  --seed S        the random choice's seed (default 0)
  --key KEY       the example's image: file name field, or TFDS image feature (default image)
  --label KEY     the example's class label field or TFDS feature (default label)
  --data-dir DIR  where the TFDS datasets are (a tfds: DATA only)
  -h, --help      this text]==]

local function trim(s) return (tostring(s):gsub("^%s+", ""):gsub("%s+$", "")) end

-- An answer as a title shows it: "" when empty, or it would not be seen.
local function shown(s)
  s = trim(s)
  return s == "" and '""' or s
end

local function text(v) return tostring(math.tointeger(v) or v) end

-- The data's ground truth of `ex` as the outfile writes it (a list of strings), or nil when the
-- example holds none: the classification evaluator's label is the data's class number
-- ex[label]; the vqa one's gts its `answers`, else `answer`, else ex[label] (the lines configs'
-- pp makes the answer with strfmt("{label}")).
local function data_truth(ex, classification, label)
  if classification then return math.tointeger(ex[label]) and {text(ex[label])} end
  if type(ex.answers) == "table" then
    local out = {}
    for j, a in ipairs(ex.answers) do out[j] = text(a) end
    return out
  end
  local v = ex.answer
  if v == nil then v = ex[label] end
  if v == nil or type(v) == "table" then return nil end
  return {text(v)}
end

local function same(a, b)
  if #a ~= #b then return false end
  for j = 1, #a do
    if a[j] ~= b[j] then return false end
  end
  return true
end

-- The data an outfile is checked against and drawn from: {what (its name in messages), hint
-- (what to give instead), examples, ids (strings, in order), index (id -> example number),
-- image(ex) -> HxWx3 tensor, names (class names, class c being names[c + 1]) or nil}.
local function indexed(data)
  data.index = {}
  for j, id in ipairs(data.ids) do data.index[id] = data.index[id] or j end
  return data
end

-- A JSON-L file: its examples in order, an id being the "id" field, else the 0-based line number.
local function jsonl_data(path, key)
  if not bv.fs.exists(path) then error(string.format("no data file '%s'", path), 0) end
  local examples, ids = {}, {}
  for line in io.lines(path) do
    if line:find("%S") then
      local ex = json.decode(line)
      ids[#ids + 1] = tostring(ex.id ~= nil and ex.id or #examples)
      examples[#examples + 1] = ex
    end
  end
  local dir = path:match("^(.*)/[^/]*$") or "."
  local function image(ex, id)
    if type(ex[key]) ~= "string" then
      error(string.format("example %s of %s has no '%s' file name (--key)", id, path, key), 0)
    end
    return bv.image.read(dir .. "/" .. ex[key])
  end
  return indexed({what = path, hint = "the data file", examples = examples, ids = ids,
                  image = image})
end

-- "tfds:NAME[/CONFIG][:VERSION]:SPLIT" -> a TFDS data config (nil for anything else). The split
-- may hold colons (train[:80%]); a version is MAJOR.MINOR.PATCH, so it is told from the split.
local function tfds_arg(arg, data_dir)
  local spec = arg:match("^tfds:(.*)$")
  if not spec then return nil end
  local name, split = spec:match("^([^:]+:[%d*]+%.[%d*]+%.[%d*]+):(.+)$")
  if not name then name, split = spec:match("^([^:]+):(.+)$") end
  if not name then
    cli.usage(string.format("'%s' names no split: a TFDS split is tfds:NAME[/CONFIG][:VERSION]:"
                            .. "SPLIT (e.g. tfds:imagenet2012:validation)", bv.snippet(arg)))
  end
  return {name = name, split = split, data_dir = data_dir}
end

local function kinds(features, kind)
  local out = {}
  for k, f in pairs(features) do
    if f.kind == kind then out[#out + 1] = k end
  end
  table.sort(out)
  return #out > 0 and table.concat(out, ", ") or "none"
end

-- Checks that the dataset has feature `name` of `kind` (features.json lists them; a dataset
-- without one is not checked); `what` says what the option is for.
local function check_feature(arg, features, name, kind, what)
  if next(features) == nil then return end
  local f = features[name]
  if f and (f.kind == kind or kind == "class_label" and f.kind == "tensor") then return end
  error(string.format("%s has no %s feature '%s' (%s); its %s features: %s", arg,
                      kind == "image" and "image" or "label", name, what,
                      kind == "image" and "image" or "class label", kinds(features, kind)), 0)
end

-- A ClassLabel's names, or nil when `label` is no ClassLabel or its names file is missing.
local function class_names(cfg, features, label)
  local f = features[label]
  if not (f and f.kind == "class_label" and bv.fs.exists(f.labels_file)) then return nil end
  return require("bv.tfds").label_names(cfg, label)
end

-- A TFDS split, read as the training pipeline reads it (bv.data.source: bv:tfrecord, in the
-- order TFDS reads with shuffle_files=False, which the evaluators follow). Only the examples'
-- small fields are kept; a picture is read again from its record when drawn.
local function tfds_data(arg, cfg, key, label, classification)
  local features = require("bv.tfds").resolve(cfg).features
  check_feature(arg, features, key, "image", "--key")
  if classification then check_feature(arg, features, label, "class_label", "--label") end
  local src = require("bv.data").source(cfg)
  local examples, ids = {}, {}
  for i = 1, src:size() do
    local ex = {}
    for k, v in pairs(src:example(i)) do
      local f = features[k]
      if k ~= key and not (f and f.kind == "image") then ex[k] = v end
    end
    ex._record = i
    examples[i], ids[i] = ex, tostring(ex.id ~= nil and ex.id or i - 1)
  end
  local function image(ex, id)
    local bytes = src:example(ex._record)[key]
    if type(bytes) ~= "string" then
      error(string.format("example %s of %s has no image feature '%s' (--key)", id, arg, key), 0)
    end
    return bv.image.decode(bytes)
  end
  return indexed({what = arg, hint = "the split", examples = examples, ids = ids, image = image,
                  names = classification and class_names(cfg, features, label) or nil})
end

-- Refuses an outfile that is not of `data`: more answers than examples, ids the data lacks,
-- answers that are not the data's examples in order (all, or its first ones: an evaluation with
-- a stop), or labels that differ from the data's at the same examples.
local function check_match(outfile, data, recs, label)
  local examples, ids, index = data.examples, data.ids, data.index
  local function refuse(fmt, ...)
    error(string.format("%s is not the outfile of %s: ", outfile, data.what)
          .. string.format(fmt, ...) .. "; give " .. data.hint .. " the evaluator ran on", 0)
  end
  if #recs > #examples then
    refuse("it holds %d answers, the data %d examples", #recs, #examples)
  end
  local missing, first_missing = 0, nil
  for j, r in ipairs(recs) do
    if not index[tostring(r.id)] then
      missing, first_missing = missing + 1, first_missing or j
    end
  end
  if missing > 0 then
    refuse("%d of its %d answers are for ids the data lacks (the first: record %d, id %s)",
           missing, #recs, first_missing, tostring(recs[first_missing].id))
  end
  for j, r in ipairs(recs) do
    if tostring(r.id) ~= ids[j] then
      refuse("its %d answers are not the data's %s%d examples in order (record %d is id %s, "
             .. "the data's example %d id %s)", #recs, #recs < #examples and "first " or "",
             #recs, j, tostring(r.id), j, ids[j])
    end
  end
  local differ, first, compared = 0, nil, 0
  for j, r in ipairs(recs) do
    local truth = data_truth(examples[j], r.classification, label)
    if truth then
      compared = compared + 1
      if not same(truth, r.gts) then differ, first = differ + 1, first or j end
    end
  end
  if differ > 0 then
    local r = recs[first]
    refuse("%d of the %d labels differ (the first: record %d, id %s: %s in the outfile, %s in the "
           .. "data)", differ, compared, first, tostring(r.id), table.concat(r.gts, " / "),
           table.concat(data_truth(examples[first], r.classification, label), " / "))
  end
  if #recs < #examples then
    io.stdout:write(string.format("bvlua mistakes: %s answers the first %d of the %d examples "
                                  .. "of %s\n", outfile, #recs, #examples, data.what))
  end
end

-- The outfile's records as {id, pred, gts (strings), classification}: the vqa evaluator's
-- {question_id, answer, gts} or the classification evaluator's {id, label, prediction}.
local function read_records(outfile)
  local records = json.decode(bv.fs.read_file(outfile))
  if type(records) ~= "table" then error(outfile .. " is not a JSON list of records", 0) end
  local recs = {}
  for j, r in ipairs(records) do
    local rec
    if type(r) == "table" and r.question_id ~= nil and r.answer ~= nil and type(r.gts) == "table" then
      local gts = {}
      for k, gt in ipairs(r.gts) do gts[k] = text(gt) end
      rec = {id = r.question_id, pred = trim(r.answer), gts = gts}
    elseif type(r) == "table" and r.id ~= nil and r.label ~= nil and r.prediction ~= nil then
      rec = {id = r.id, pred = text(r.prediction), gts = {text(r.label)}, classification = true}
    else
      error(string.format("%s: record %d lacks question_id, answer and gts (the vqa evaluator's "
                          .. "outfile, with question_id kept in its pp) or id, label and "
                          .. "prediction (the classification evaluator's outfile)", outfile, j), 0)
    end
    recs[j] = rec
  end
  return recs
end

-- How a title shows an answer: a classification class by its name when the data has names.
local function title_of(r, names)
  local function show(s)
    local c = r.classification and names and math.tointeger(tonumber(s))
    return c and names[c + 1] or shown(s)
  end
  local gts = {}
  for k, gt in ipairs(r.gts) do gts[k] = show(gt) end
  return string.format("Pred: %s   GT: %s", show(r.pred), table.concat(gts, " / "))
end

local function parse_args(argv)
  local o = {files = {}, out = "mistakes.png", n = 8, seed = 0, key = "image", label = "label"}
  local values = {["-o"] = "out", ["--key"] = "key", ["--label"] = "label",
                  ["--data-dir"] = "data_dir"}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      o.help = true
    elseif values[a] then
      o[values[a]] = cli.value(argv, i)
      i = i + 1
    elseif a == "--n" or a == "--seed" then
      o[a:sub(3)] = cli.count(argv, i)
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      cli.usage("unknown option " .. a)
    else
      o.files[#o.files + 1] = a
    end
    i = i + 1
  end
  return o
end

local function main(argv)
  local o = parse_args(argv)
  if o.help then
    io.stdout:write(M.USAGE, "\n")
    return 0
  end
  if #o.files ~= 2 then
    cli.usage("give the evaluator's OUTFILE.json and the DATA.jsonl or tfds:NAME:SPLIT it ran on")
  end
  local outfile, arg = o.files[1], o.files[2]
  local cfg = tfds_arg(arg, o.data_dir)
  if o.data_dir and not cfg then
    cli.usage("--data-dir is for a TFDS split (tfds:NAME:SPLIT), not " .. arg)
  end

  local recs = read_records(outfile)
  local data = cfg and tfds_data(arg, cfg, o.key, o.label, recs[1] and recs[1].classification)
    or jsonl_data(arg, o.key)
  check_match(outfile, data, recs, o.label)

  local wrong = {}
  for _, rec in ipairs(recs) do
    local right = false
    for _, gt in ipairs(rec.gts) do right = right or trim(gt) == rec.pred end
    if not right then wrong[#wrong + 1] = rec end
  end
  if #wrong == 0 then
    io.stdout:write(string.format("bvlua mistakes: no mistakes among the %d answers of %s\n",
                                  #recs, outfile))
    return 0
  end

  -- n of them at random (a seeded shuffle), then in question order.
  local rng = bv.rng(o.seed)
  for j = #wrong, 2, -1 do
    local k = rng:integer(1, j)
    wrong[j], wrong[k] = wrong[k], wrong[j]
  end
  local tiles = {}
  for j = 1, math.min(o.n, #wrong) do
    local r = wrong[j]
    local id = tostring(r.id)
    local ex = data.examples[data.index[id]]
    tiles[#tiles + 1] = {image = data.image(ex, id), title = title_of(r, data.names), id = r.id}
  end
  local index = data.index
  table.sort(tiles, function(a, b) return index[tostring(a.id)] < index[tostring(b.id)] end)
  bv._plot.contact_sheet(tiles, o.out, {columns = math.min(4, #tiles), cell = 224})
  io.stdout:write(string.format("bvlua mistakes: %d of %d answers are wrong; wrote %d to %s\n",
                                #wrong, #recs, #tiles, o.out))
  for _, t in ipairs(tiles) do io.stdout:write("  id ", tostring(t.id), ": ", t.title, "\n") end
  return 0
end

function M.main(argv) return cli.run("mistakes", M.USAGE, main, argv) end

return M
