-- bvlua mistakes: the tutorial's picture of mistakes. From an evaluator's outfile (the vqa one's
-- JSON list of {question_id, answer, gts}, or the classification one's {id, label, prediction})
-- and the JSON-L data it evaluated, a contact sheet of randomly chosen wrong answers, each image
-- titled "Pred: x   GT: y". An outfile whose examples or labels are not the data's (another
-- split) is refused rather than drawn under wrong titles.
local cli = require "bv.commands.cli"
local json = require "bv.json"

local M = {}

M.USAGE = [==[
usage: bvlua mistakes OUTFILE.json DATA.jsonl [-o FILE.png] [--n N] [--seed S] [--key KEY]

OUTFILE.json: what the vqa evaluator wrote (e.g. runs/pg/vqa_eval_120.json), or the
classification evaluator with an outfile (runs/resnet/eval_acc_400.json). DATA.jsonl: the
split it evaluated; an example's question_id is its "id" field, else its 0-based line number
(as the bv:jsonl source numbers them), and its picture the file named by --key (default image)
relative to the data file's directory. The outfile must answer the data's examples in order
(all of them, or its first N when the evaluation had a stop) with the data's labels (the
classification label is the data's "label"; vqa's gts are its "answers", else "answer", else
"label"), or it is refused as another split's. An empty answer is shown as "".

options:
  -o FILE     the contact sheet to write (default mistakes.png)
  --n N       how many mistakes, chosen at random (default 8)
  --seed S    the random choice's seed (default 0)
  --key KEY   the example's image file field (default image)
  -h, --help  this text]==]

local function trim(s) return (tostring(s):gsub("^%s+", ""):gsub("%s+$", "")) end

-- An answer as a title shows it: "" when empty, or it would not be seen.
local function shown(s)
  s = trim(s)
  return s == "" and '""' or s
end

local function text(v) return tostring(math.tointeger(v) or v) end

-- The data's ground truth of `ex` as the outfile writes it (a list of strings), or nil when the
-- example holds none: the classification evaluator's label is the data's class number `label`;
-- the vqa one's gts its `answers`, else `answer`, else `label` (the lines configs' pp makes the
-- answer with strfmt("{label}")).
local function data_truth(ex, classification)
  if classification then return math.tointeger(ex.label) and {text(ex.label)} end
  if type(ex.answers) == "table" then
    local out = {}
    for j, a in ipairs(ex.answers) do out[j] = text(a) end
    return out
  end
  local v = ex.answer
  if v == nil then v = ex.label end
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

-- The data file's examples in order, their ids, and the index of each id.
local function read_data(data)
  if not bv.fs.exists(data) then error(string.format("no data file '%s'", data), 0) end
  local examples, ids, index = {}, {}, {}
  for line in io.lines(data) do
    if line:find("%S") then
      local ex = json.decode(line)
      local id = tostring(ex.id ~= nil and ex.id or #examples)
      examples[#examples + 1], ids[#ids + 1] = ex, id
      index[id] = index[id] or #examples
    end
  end
  return examples, ids, index
end

-- Refuses an outfile that is not of `data`: more answers than examples, ids the data lacks,
-- answers that are not the data's examples in order (all, or its first ones: an evaluation with
-- a stop), or labels that differ from the data's at the same examples.
local function check_match(outfile, data, recs, examples, ids, index)
  local function refuse(fmt, ...)
    error(string.format("%s is not the outfile of %s: " .. fmt .. "; give the data file the "
                        .. "evaluator ran on", outfile, data, ...), 0)
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
    local truth = data_truth(examples[j], r.classification)
    if truth then
      compared = compared + 1
      if not same(truth, r.gts) then differ, first = differ + 1, first or j end
    end
  end
  if differ > 0 then
    local r = recs[first]
    refuse("%d of the %d labels differ (the first: record %d, id %s: %s in the outfile, %s in the "
           .. "data)", differ, compared, first, tostring(r.id), table.concat(r.gts, " / "),
           table.concat(data_truth(examples[first], r.classification), " / "))
  end
  if #recs < #examples then
    io.stdout:write(string.format("bvlua mistakes: %s answers the first %d of the %d examples "
                                  .. "of %s\n", outfile, #recs, #examples, data))
  end
end

local function main(argv)
  local files, out, n, seed, key = {}, "mistakes.png", 8, 0, "image"
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      io.stdout:write(M.USAGE, "\n")
      return 0
    elseif a == "-o" or a == "--key" then
      if a == "-o" then out = cli.value(argv, i) else key = cli.value(argv, i) end
      i = i + 1
    elseif a == "--n" or a == "--seed" then
      if a == "--n" then n = cli.count(argv, i) else seed = cli.count(argv, i) end
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      cli.usage("unknown option " .. a)
    else
      files[#files + 1] = a
    end
    i = i + 1
  end
  if #files ~= 2 then cli.usage("give the evaluator's OUTFILE.json and the DATA.jsonl") end
  local outfile, data = files[1], files[2]

  local records = json.decode(bv.fs.read_file(outfile))
  if type(records) ~= "table" then error(outfile .. " is not a JSON list of records", 0) end
  -- Two outfiles: the vqa evaluator's {question_id, answer, gts} and the classification
  -- evaluator's {id, label, prediction}; both become {id, pred, gts}.
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
  local examples, ids, index = read_data(data)
  check_match(outfile, data, recs, examples, ids, index)

  local wrong = {}
  for _, rec in ipairs(recs) do
    local right = false
    for _, gt in ipairs(rec.gts) do right = right or trim(gt) == rec.pred end
    if not right then wrong[#wrong + 1] = rec end
  end
  if #wrong == 0 then
    io.stdout:write(string.format("bvlua mistakes: no mistakes among the %d answers of %s\n",
                                  #records, outfile))
    return 0
  end

  local dir = data:match("^(.*)/[^/]*$") or "."

  -- n of them at random (a seeded shuffle), then in question order.
  local rng = bv.rng(seed)
  for j = #wrong, 2, -1 do
    local k = rng:integer(1, j)
    wrong[j], wrong[k] = wrong[k], wrong[j]
  end
  local tiles = {}
  for j = 1, math.min(n, #wrong) do
    local r = wrong[j]
    local ex = examples[index[tostring(r.id)]]
    if type(ex[key]) ~= "string" then
      error(string.format("example %s of %s has no '%s' file name (--key)", tostring(r.id), data,
                          key), 0)
    end
    local gts_shown = {}
    for k, gt in ipairs(r.gts) do gts_shown[k] = shown(gt) end
    tiles[#tiles + 1] = {image = bv.image.read(dir .. "/" .. ex[key]),
                         title = string.format("Pred: %s   GT: %s", shown(r.pred),
                                               table.concat(gts_shown, " / ")), id = r.id}
  end
  table.sort(tiles, function(a, b) return index[tostring(a.id)] < index[tostring(b.id)] end)
  bv._plot.contact_sheet(tiles, out, {columns = math.min(4, #tiles), cell = 224})
  io.stdout:write(string.format("bvlua mistakes: %d of %d answers are wrong; wrote %d to %s\n",
                                #wrong, #records, #tiles, out))
  for _, t in ipairs(tiles) do io.stdout:write("  id ", tostring(t.id), ": ", t.title, "\n") end
  return 0
end

function M.main(argv) return cli.run("mistakes", M.USAGE, main, argv) end

return M
