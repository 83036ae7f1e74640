-- bvlua runs: the table big_vision's GPU tutorial builds with jq, printf and sort. One row per
-- run (a workdir with big_vision_metrics.txt): the config values in which the runs differ (from
-- each config.json), the steps done, and the last and best value of a metric; best first.
local cli = require "bv.commands.cli"
local json = require "bv.json"
local metrics = require "bv.metrics"

local M = {}

M.USAGE = [[
usage: bvlua runs DIR... [--metric KEY] [--min | --max] [--csv | --json]

DIR is a workdir (it holds big_vision_metrics.txt) or a directory of workdirs (runs/).
Prints one row per run: the config values in which the runs differ (config.json's keys,
nested ones as a.b), the last step logged, and the last and best value of the metric, best run
first.

options:
  --metric KEY   the metric to rank by (default: the first eval metric ending in prec@1 or
                 acc, else training_loss)
  --min, --max   whether smaller or larger is better (default: smaller for names holding
                 loss or pplx, larger otherwise)
  --csv, --json  for scripts: comma-separated values, or a JSON list of objects
  -h, --help     this text]]

local function is_run(dir) return bv.fs.exists(dir .. "/big_vision_metrics.txt") end

-- The workdirs named by `paths`: each one, or the runs directly inside it (also `bvlua plot`'s).
local function find_runs(paths)
  local dirs = {}
  for _, p in ipairs(paths) do
    p = p:gsub("/+$", "")
    if is_run(p) then
      dirs[#dirs + 1] = p
    elseif bv.fs.is_dir(p) then
      local found = false
      for _, name in ipairs(bv.fs.list(p)) do
        if is_run(p .. "/" .. name) then
          dirs[#dirs + 1] = p .. "/" .. name
          found = true
        end
      end
      if not found then error(string.format("'%s' holds no run (no big_vision_metrics.txt in it "
                                            .. "or in a directory inside it)", p), 0) end
    else
      error(string.format("'%s' is not a directory", p), 0)
    end
  end
  return dirs
end

-- config.json flattened to "a.b" -> a printable value.
local function flat_config(dir)
  local out = {}
  if not bv.fs.exists(dir .. "/config.json") then return out end
  local function walk(prefix, t)
    for k, v in pairs(t) do
      local key = prefix .. tostring(k)
      if type(v) == "table" and next(v) ~= nil and #v == 0 then
        walk(key .. ".", v)
      else
        out[key] = type(v) == "table" and json.encode(v) or tostring(v)
      end
    end
  end
  walk("", json.decode(bv.fs.read_file(dir .. "/config.json")))
  return out
end

-- The metric to rank by when none is named: the first eval metric ending in prec@1 or acc.
local function default_metric(rows)
  local names = {}
  for _, row in ipairs(rows) do
    for k in pairs(row) do names[k] = true end
  end
  local sorted = {}
  for k in pairs(names) do sorted[#sorted + 1] = k end
  table.sort(sorted)
  for _, k in ipairs(sorted) do
    if k:find("/prec@1$") or k:find("/acc$") then return k end
  end
  return "training_loss"
end

-- Reads one run: {dir, config, step, last, best} for `metric` (nil when the run has none).
local function read_run(dir, metric, smaller)
  local rows = metrics.read(dir .. "/big_vision_metrics.txt")
  local r = {dir = dir, config = flat_config(dir), step = 0}
  for _, row in ipairs(rows) do
    r.step = math.max(r.step, row.step or 0)
    local v = row[metric]
    if type(v) == "number" and v == v then
      r.last = v
      if r.best == nil or (smaller and v < r.best) or (not smaller and v > r.best) then r.best = v end
    end
  end
  return r
end

local function main(argv)
  local paths, metric, smaller, format = {}, nil, nil, "table"
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      io.stdout:write(M.USAGE, "\n")
      return 0
    elseif a == "--metric" then
      metric = cli.value(argv, i)
      i = i + 1
    elseif a:match("^%-%-metric=") then
      metric = a:match("^%-%-metric=(.*)$")
    elseif a == "--min" or a == "--max" then
      smaller = a == "--min"
    elseif a == "--csv" or a == "--json" then
      format = a:sub(3)
    elseif a:sub(1, 1) == "-" then
      cli.usage("unknown option " .. a)
    else
      paths[#paths + 1] = a
    end
    i = i + 1
  end
  if #paths == 0 then cli.usage("no DIR given") end
  local dirs = find_runs(paths)
  metric = metric or default_metric(metrics.read(dirs[1] .. "/big_vision_metrics.txt"))
  if smaller == nil then smaller = metric:find("loss") ~= nil or metric:find("pplx") ~= nil end
  local runs = {}
  for _, dir in ipairs(dirs) do runs[#runs + 1] = read_run(dir, metric, smaller) end

  -- The config keys whose values differ between runs (all of them for a single run: none).
  local keys, seen = {}, {}
  for _, r in ipairs(runs) do
    for k in pairs(r.config) do
      if not seen[k] then
        seen[k] = true
        for _, other in ipairs(runs) do
          if other.config[k] ~= r.config[k] then
            keys[#keys + 1] = k
            break
          end
        end
      end
    end
  end
  table.sort(keys)

  table.sort(runs, function(a, b)
    if (a.best == nil) ~= (b.best == nil) then return a.best ~= nil end
    if a.best ~= nil and a.best ~= b.best then
      if smaller then return a.best < b.best end
      return a.best > b.best
    end
    return a.dir < b.dir
  end)

  local header = {"run"}
  for _, k in ipairs(keys) do header[#header + 1] = k end
  for _, h in ipairs({"step", "last " .. metric, "best " .. metric}) do header[#header + 1] = h end
  local function cells(r)
    local out = {r.dir}
    for _, k in ipairs(keys) do out[#out + 1] = r.config[k] or "" end
    out[#out + 1] = tostring(math.tointeger(r.step) or r.step)
    out[#out + 1] = r.last and string.format("%.6g", r.last) or ""
    out[#out + 1] = r.best and string.format("%.6g", r.best) or ""
    return out
  end

  if format == "json" then
    local list = {}
    for _, r in ipairs(runs) do
      local row = {run = r.dir, step = r.step, metric = metric, last = r.last, best = r.best}
      for _, k in ipairs(keys) do row[k] = r.config[k] end
      list[#list + 1] = row
    end
    io.stdout:write(json.encode(list), "\n")
  elseif format == "csv" then
    local function csv(cols)
      local out = {}
      for j, c in ipairs(cols) do
        out[j] = c:find('[,"\n]') and ('"' .. c:gsub('"', '""') .. '"') or c
      end
      return table.concat(out, ",")
    end
    io.stdout:write(csv(header), "\n")
    for _, r in ipairs(runs) do io.stdout:write(csv(cells(r)), "\n") end
  else
    -- Long values (a pp string) are cut in the middle on a terminal; --csv/--json keep them.
    local function short(c)
      return #c > 40 and (c:sub(1, 18) .. "..." .. c:sub(-19)) or c
    end
    local rows = {header}
    for _, r in ipairs(runs) do
      local row = cells(r)
      for j = 2, #row do row[j] = short(row[j]) end
      rows[#rows + 1] = row
    end
    local width = {}
    for _, row in ipairs(rows) do
      for j, c in ipairs(row) do width[j] = math.max(width[j] or 0, #c) end
    end
    for _, row in ipairs(rows) do
      local out = {}
      for j, c in ipairs(row) do
        out[j] = j == 1 and c .. string.rep(" ", width[j] - #c) or string.rep(" ", width[j] - #c) .. c
      end
      io.stdout:write(table.concat(out, "  "):gsub("%s+$", ""), "\n")
    end
  end
  return 0
end

-- Runs `bvlua runs` with the words after "runs"; returns the exit code.
function M.main(argv) return cli.run("runs", M.USAGE, main, argv) end

M.find_runs, M.default_metric = find_runs, default_metric

return M
