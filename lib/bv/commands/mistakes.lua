-- bvlua mistakes: the tutorial's picture of mistakes. From an evaluator's outfile (the vqa one's
-- JSON list of {question_id, answer, gts}, or the classification one's {id, label, prediction})
-- and the JSON-L data it evaluated, a contact sheet of randomly chosen wrong answers, each image
-- titled "Pred: x   GT: y".
local cli = require "bv.commands.cli"
local json = require "bv.json"

local M = {}

M.USAGE = [==[
usage: bvlua mistakes OUTFILE.json DATA.jsonl [-o FILE.png] [--n N] [--seed S] [--key KEY]

OUTFILE.json: what the vqa evaluator wrote (e.g. runs/pg/vqa_eval_120.json), or the
classification evaluator with an outfile (runs/resnet/eval_acc_400.json). DATA.jsonl: the
split it evaluated; an example's question_id is its "id" field, else its 0-based line number
(as the bv:jsonl source numbers them), and its picture the file named by --key (default image)
relative to the data file's directory.

options:
  -o FILE     the contact sheet to write (default mistakes.png)
  --n N       how many mistakes, chosen at random (default 8)
  --seed S    the random choice's seed (default 0)
  --key KEY   the example's image file field (default image)
  -h, --help  this text]==]

local function trim(s) return (tostring(s):gsub("^%s+", ""):gsub("%s+$", "")) end

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
  local wrong = {}
  for j, r in ipairs(records) do
    local rec
    if type(r) == "table" and r.question_id ~= nil and r.answer ~= nil and type(r.gts) == "table" then
      rec = {id = r.question_id, pred = trim(r.answer), gts = r.gts}
    elseif type(r) == "table" and r.id ~= nil and r.label ~= nil and r.prediction ~= nil then
      rec = {id = r.id, pred = tostring(r.prediction), gts = {tostring(r.label)}}
    else
      error(string.format("%s: record %d lacks question_id, answer and gts (the vqa evaluator's "
                          .. "outfile, with question_id kept in its pp) or id, label and "
                          .. "prediction (the classification evaluator's outfile)", outfile, j), 0)
    end
    local right = false
    for _, gt in ipairs(rec.gts) do right = right or trim(gt) == rec.pred end
    if not right then wrong[#wrong + 1] = rec end
  end
  if #wrong == 0 then
    io.stdout:write(string.format("bvlua mistakes: no mistakes among the %d answers of %s\n",
                                  #records, outfile))
    return 0
  end

  -- The data's examples by id.
  local dir = data:match("^(.*)/[^/]*$") or "."
  local by_id, line_no = {}, 0
  for line in io.lines(data) do
    if line:find("%S") then
      local ex = json.decode(line)
      by_id[tostring(ex.id ~= nil and ex.id or line_no)] = ex
      line_no = line_no + 1
    end
  end

  -- n of them at random (a seeded shuffle), then in question order.
  local rng = bv.rng(seed)
  for j = #wrong, 2, -1 do
    local k = rng:integer(1, j)
    wrong[j], wrong[k] = wrong[k], wrong[j]
  end
  local tiles = {}
  for j = 1, math.min(n, #wrong) do
    local r = wrong[j]
    local ex = by_id[tostring(r.id)]
    if not ex then
      error(string.format("question_id %s of %s is not an example of %s", tostring(r.id),
                          outfile, data), 0)
    end
    if type(ex[key]) ~= "string" then
      error(string.format("example %s of %s has no '%s' file name (--key)", tostring(r.id), data,
                          key), 0)
    end
    tiles[#tiles + 1] = {image = bv.image.read(dir .. "/" .. ex[key]),
                         title = string.format("Pred: %s   GT: %s", r.pred,
                                               table.concat(r.gts, " / "))}
  end
  bv._plot.contact_sheet(tiles, out, {columns = math.min(4, #tiles), cell = 224})
  io.stdout:write(string.format("bvlua mistakes: %d of %d answers are wrong; wrote %d to %s\n",
                                #wrong, #records, #tiles, out))
  return 0
end

function M.main(argv) return cli.run("mistakes", M.USAGE, main, argv) end

return M
