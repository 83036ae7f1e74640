-- bvlua runs: the table big_vision's GPU tutorial builds with jq, printf and sort. One row per
-- run (a workdir with big_vision_metrics.txt): the config values in which the runs differ (from
-- each config.json), the steps done, and the last and best value of a metric; ranked by the
-- last value (the tutorial's jq `last`), or the best with --best.
local cli = require "bv.commands.cli"
local json = require "bv.json"
local literal = require "bv.literal"
local metrics = require "bv.metrics"
local suggest = require "bv.suggest"

local M = {}

M.USAGE = [[
usage: bvlua runs DIR... [--metric KEY] [--best] [--min | --max] [--keys K1,K2] [--csv | --json]

DIR is a workdir (it holds big_vision_metrics.txt), a directory of workdirs (a sweep) or a
directory of sweeps. Prints one row per run, named by its path below the directories all runs
share: the config values in which the runs differ (config.json's keys, nested ones as a.b; a
long value shows the part that differs, "…" for what all runs share), the last step logged,
and the last and best value of the metric, ranked by the last value, best run first. The table
keeps to the keys that fit the terminal (COLUMNS, else its width, else 100) and says on stderr
which ones it left out.

options:
  --metric KEY   the metric to rank by (default: the first eval metric ending in prec@1 or
                 acc, else training_loss)
  --best         rank by each run's best value of the metric instead of its last
  --min, --max   whether smaller or larger is better (default: smaller for names holding
                 loss or pplx, larger otherwise)
  --keys K1,K2   the config keys to show, whether they differ or not (K: a key, or a.b for
                 all of a's keys)
  --csv, --json  for scripts: every key that differs (or --keys), whole values. When a key
                 is named like another column (run, step, ...), key columns are config.KEY.
                 JSON: a list of {"run", "step", "metric", "last", "best", "config": {KEY:
                 value}}, numbers as numbers and config values with their JSON types
  -h, --help     this text]]

local CELL = 40     -- a config value's most characters in the table
local MIN_CELL = 16 -- the fewest it gets to fit a narrow terminal
local CONTEXT = 6   -- characters shown either side of the part of a value that differs

local function is_run(dir) return bv.fs.exists(dir .. "/" .. metrics.FILE_NAME) end

-- Appends the runs in `dir` and in the directories `depth - 1` levels further down to `out`.
local function runs_below(dir, depth, out)
  for _, name in ipairs(bv.fs.list(dir)) do
    local p = dir .. "/" .. name
    if name:sub(1, 1) ~= "." then
      if is_run(p) then
        out[#out + 1] = p
      elseif depth > 1 and bv.fs.is_dir(p) then
        runs_below(p, depth - 1, out)
      end
    end
  end
end

-- The workdirs named by `paths`: each one, or the runs inside it, or inside the directories in
-- it (a directory of sweeps). Also `bvlua plot`'s.
local function find_runs(paths)
  local dirs, seen = {}, {}
  for _, p in ipairs(paths) do
    p = p:gsub("(.)/+$", "%1")
    local found = {}
    if is_run(p) then
      found[1] = p
    elseif bv.fs.is_dir(p) then
      runs_below(p, 2, found)
      if #found == 0 then
        error(string.format("'%s' holds no run (no %s in it, in a directory inside it or one "
                            .. "level further down)", p, metrics.FILE_NAME), 0)
      end
    else
      error(string.format("'%s' is not a directory", p), 0)
    end
    for _, d in ipairs(found) do
      if not seen[d] then
        seen[d] = true
        dirs[#dirs + 1] = d
      end
    end
  end
  return dirs
end

-- The runs' names: their paths without the directories all of them share (a single run's is
-- its path). Also `bvlua plot`'s.
local function run_names(dirs)
  if #dirs < 2 then return {dirs[1]} end
  local prefix = dirs[1]:match("^(.*/)") or ""
  for _, dir in ipairs(dirs) do
    while prefix ~= "" and dir:sub(1, #prefix) ~= prefix do
      prefix = prefix:match("^(.*/).+/$") or ""
    end
  end
  local names = {}
  for i, dir in ipairs(dirs) do names[i] = dir:sub(#prefix + 1) end
  return names
end

-- config.json flattened to "a.b" -> its value as decoded ({} when the run has none).
local function flat_config(dir)
  local out, path = {}, dir .. "/config.json"
  if not bv.fs.exists(path) then return out end
  local ok, cfg = pcall(json.decode, bv.fs.read_file(path))
  if not ok then error(path .. ": " .. tostring(cfg), 0) end
  local function walk(prefix, t)
    for k, v in pairs(t) do
      local key = prefix .. tostring(k)
      if type(v) == "table" and v ~= literal.null and next(v) ~= nil and #v == 0 then
        walk(key .. ".", v)
      else
        out[key] = v
      end
    end
  end
  if type(cfg) == "table" then walk("", cfg) end
  return out
end

-- A config value as the table shows it: strings as they are, the rest as JSON.
local function text(v)
  if type(v) == "string" then return v end
  return json.encode(v)
end

-- The metric to rank by when none is named: the first eval metric ending in prec@1 or acc
-- that any of the runs (tables with .rows, the lines of their metrics files) logged, else
-- training_loss. Also `bvlua plot`'s.
local function default_metric(runs)
  local names = {}
  for _, r in ipairs(runs) do
    for _, row in ipairs(r.rows) do
      for k in pairs(row) do names[k] = true end
    end
  end
  local sorted = {}
  for k in pairs(names) do sorted[#sorted + 1] = k end
  table.sort(sorted)
  for _, k in ipairs(sorted) do
    if k:find("/prec@1$") or k:find("/acc$") then return k end
  end
  return "training_loss"
end

-- Sets r.step, r.last (the metric's last value, NaN included: a run that diverged ends there)
-- and r.best (the best value that is a number) from r.rows.
local function summarize(r, metric, smaller)
  r.step = 0
  for _, row in ipairs(r.rows) do
    r.step = math.max(r.step, row.step or 0)
    local v = row[metric]
    if type(v) == "number" then
      r.last = v
      if v == v and (r.best == nil or (smaller and v < r.best) or (not smaller and v > r.best)) then
        r.best = v
      end
    end
  end
end

-- The metric names the runs logged (sorted), and whether `metric` is one of them.
local function metric_names(runs)
  local set, names = {}, {}
  for _, r in ipairs(runs) do
    for _, row in ipairs(r.rows) do
      for k in pairs(row) do
        if k ~= "step" and k ~= "note" and not set[k] then  -- note: bvlua attach's, text
          set[k] = true
          names[#names + 1] = k
        end
      end
    end
  end
  table.sort(names)
  return names, set
end

local function check_metric(metric, runs)
  local names, set = metric_names(runs)
  if #names == 0 or set[metric] then return end
  local hint = suggest.did_you_mean(metric, names)
  if hint == "" then
    local shown = table.move(names, 1, math.min(#names, 20), 1, {})
    hint = "; the runs logged " .. table.concat(shown, ", ") .. (#names > 20 and ", …" or "")
  end
  error(string.format("no run logged metric '%s'%s", metric, hint), 0)
end

-- The config keys whose values differ between runs (none for a single run), sorted.
local function differing_keys(runs)
  local keys, seen = {}, {}
  for _, r in ipairs(runs) do
    for k, v in pairs(r.config) do
      if not seen[k] then
        seen[k] = true
        local t = text(v)
        for _, other in ipairs(runs) do
          local o = other.config[k]
          if o == nil or text(o) ~= t then
            keys[#keys + 1] = k
            break
          end
        end
      end
    end
  end
  table.sort(keys)
  return keys
end

-- The keys --keys names: each one present in some run's config, or a prefix of such keys.
local function chosen_keys(spec, runs)
  local all, set = {}, {}
  for _, r in ipairs(runs) do
    for k in pairs(r.config) do
      if not set[k] then
        set[k] = true
        all[#all + 1] = k
      end
    end
  end
  table.sort(all)
  local keys = {}
  for k in spec:gmatch("[^,]+") do
    k = k:match("^%s*(.-)%s*$")
    if set[k] then
      keys[#keys + 1] = k
    else
      local n = #keys
      for _, key in ipairs(all) do
        if key:sub(1, #k + 1) == k .. "." then keys[#keys + 1] = key end
      end
      if #keys == n then
        error(string.format("--keys: no run's config has key '%s'%s", k,
                            suggest.did_you_mean(k, all)), 0)
      end
    end
  end
  if #keys == 0 then cli.usage("--keys needs at least one key") end
  return keys
end

-- The characters of s (its bytes when it is not valid UTF-8).
local function chars(s)
  local out = {}
  if utf8.len(s) then
    for _, c in utf8.codes(s) do out[#out + 1] = utf8.char(c) end
  else
    for i = 1, #s do out[i] = s:sub(i, i) end
  end
  return out
end

local function width(s) return utf8.len(s) or #s end

-- cs[i..j] joined, cut in the middle to at most n characters.
local function cut(cs, i, j, n)
  if j - i + 1 <= n then return table.concat(cs, "", i, j) end
  local head = n // 2
  return table.concat(cs, "", i, i + head - 1) .. "…"
    .. table.concat(cs, "", j - (n - head - 1) + 1, j)
end

local function is_word(ch) return ch ~= nil and ch:find("^[%w_]") ~= nil end

-- The cells of one key's column (values[i] for run i, nil where a run lacks the key), each at
-- most `limit` characters. When some value is longer, what all values start and end with is
-- elided: each cell shows the part where the values differ, with some context either side.
local function column_cells(values, n, limit)
  local cs, long, first, same = {}, false, nil, true
  for i = 1, n do
    if values[i] then
      cs[i] = chars(values[i])
      long = long or #cs[i] > limit
      first = first or cs[i]
      same = same and values[i] == table.concat(first)
    end
  end
  local out = {}
  if not long then
    for i = 1, n do out[i] = values[i] or "" end
    return out
  end
  local pre, suf, shortest = #first, #first, #first
  for i = 1, n do
    local c = cs[i]
    if c then
      local k = 0
      while k < pre and k < #c and c[k + 1] == first[k + 1] do k = k + 1 end
      pre = k
      k = 0
      while k < suf and k < #c and c[#c - k] == first[#first - k] do k = k + 1 end
      suf = k
      shortest = math.min(shortest, #c)
    end
  end
  suf = math.min(suf, shortest - pre)
  for i = 1, n do
    local c = cs[i]
    if not c then
      out[i] = ""
    elseif same then  -- no value differs: cut it in the middle
      out[i] = cut(c, 1, #c, limit)
    else
      -- Context either side: the room the differing part leaves; when it is cut, only the
      -- rest of a word it starts or ends inside of.
      local room = limit - 2 - (#c - pre - suf)
      local lo, hi = pre + 1, #c - suf
      if room >= 2 then
        lo, hi = lo - room // 2, hi + room // 2
        lo, hi = math.max(1, lo - math.max(0, hi - #c)), math.min(#c, hi + math.max(0, 1 - lo))
      else
        local start_in, end_in = is_word(c[lo]), is_word(c[hi])
        while start_in and lo > 1 and pre + 1 - lo < CONTEXT and is_word(c[lo - 1]) do
          lo = lo - 1
        end
        while end_in and hi < #c and hi - (#c - suf) < CONTEXT and is_word(c[hi + 1]) do
          hi = hi + 1
        end
      end
      local left, right = lo > 1 and "…" or "", hi < #c and "…" or ""
      out[i] = left .. cut(c, lo, hi, limit - #chars(left .. right)) .. right
    end
  end
  return out
end

-- The names of the config keys' columns beside the `fixed` ones (run, step, ...): the keys,
-- or, when one of them is named like a fixed column, "config." and the key for each (no fixed
-- column starts with "config.").
local function column_names(keys, fixed)
  local is_fixed, prefix, names = {}, "", {}
  for _, f in ipairs(fixed) do is_fixed[f] = true end
  for _, k in ipairs(keys) do
    if is_fixed[k] then prefix = "config." end
  end
  for _, k in ipairs(keys) do names[k] = prefix .. k end
  return names
end

-- The number of columns the table may use: COLUMNS, else the terminal's, else 100.
local function terminal_width()
  local columns = math.tointeger(tonumber(os.getenv("COLUMNS") or ""))
  if columns and columns > 0 then return columns end
  local tty = require "bv._repl"
  if tty.isatty(1) then return tty.columns() end
  return 100
end

local function number_text(v)
  if v == nil then return "" end
  if v ~= v then return "nan" end
  if v == math.huge or v == -math.huge then return v > 0 and "inf" or "-inf" end
  return string.format("%.6g", v)
end

-- Prints rows (lists of cells) as columns: the first left-aligned, the others right-aligned.
local function print_table(rows)
  local widths = {}
  for _, row in ipairs(rows) do
    for j, c in ipairs(row) do widths[j] = math.max(widths[j] or 0, width(c)) end
  end
  for _, row in ipairs(rows) do
    local out = {}
    for j, c in ipairs(row) do
      local pad = string.rep(" ", widths[j] - width(c))
      out[j] = j == 1 and c .. pad or pad .. c
    end
    io.stdout:write((table.concat(out, "  "):gsub("%s+$", "")), "\n")
  end
end

local function csv_line(cols)
  local out = {}
  for j, c in ipairs(cols) do
    out[j] = c:find('[,"\n]') and ('"' .. c:gsub('"', '""') .. '"') or c
  end
  return table.concat(out, ",")
end

-- One key's column in the table: its cells (values at most `limit` characters) and its width.
local function key_column(runs, k, limit, label)
  local values = {}
  for i, r in ipairs(runs) do values[i] = r.config[k] ~= nil and text(r.config[k]) or nil end
  local cells, w = column_cells(values, #runs, limit), width(label or k)
  for _, c in ipairs(cells) do w = math.max(w, width(c)) end
  return cells, w
end

-- The keys to show in `room` columns and their cells: keys every run has come first (a
-- sweep's axes), narrow ones before wide ones (so that as many as can show), and a long value
-- gets fewer characters (down to MIN_CELL) to fit. Also returns the keys left out.
local function fit_keys(runs, keys, room, labels)
  local order, everywhere, w0 = {}, {}, {}
  for _, k in ipairs(keys) do
    local all = true
    for _, r in ipairs(runs) do all = all and r.config[k] ~= nil end
    everywhere[k] = all
    order[#order + 1] = k
    w0[k] = select(2, key_column(runs, k, CELL, labels[k]))
  end
  table.sort(order, function(a, b)
    if everywhere[a] ~= everywhere[b] then return everywhere[a] end
    if w0[a] ~= w0[b] then return w0[a] < w0[b] end
    return a < b
  end)
  local columns, left_out = {}, {}
  for _, k in ipairs(order) do
    local limit = math.max(MIN_CELL, math.min(CELL, room - 2))
    local cells, w = key_column(runs, k, limit, labels[k])
    if w + 2 <= room then
      columns[k] = cells
      room = room - w - 2
    else
      left_out[#left_out + 1] = k
    end
  end
  local shown = {}
  for _, k in ipairs(keys) do
    if columns[k] then shown[#shown + 1] = k end
  end
  return shown, columns, left_out
end

-- The table on a terminal: `fixed` (the run, step and metric cells, a header row first) with
-- the keys' columns after the run's name: all `keys` when `explicit`, else those that fit the
-- terminal, naming the others on stderr.
local function write_table(runs, keys, fixed, explicit)
  local shown, columns, left_out, columns_total = keys, {}, {}, terminal_width()
  local labels = column_names(keys, fixed[1])
  if explicit then
    for _, k in ipairs(keys) do columns[k] = key_column(runs, k, CELL, labels[k]) end
  else
    local room = columns_total
    for j = 1, #fixed[1] do
      local w = 0
      for _, row in ipairs(fixed) do w = math.max(w, width(row[j])) end
      room = room - w - (j > 1 and 2 or 0)
    end
    shown, columns, left_out = fit_keys(runs, keys, room, labels)
  end
  local rows = {}
  for i, row in ipairs(fixed) do
    local out = {row[1]}
    for _, k in ipairs(shown) do out[#out + 1] = i == 1 and labels[k] or columns[k][i - 1] end
    for j = 2, #row do out[#out + 1] = row[j] end
    rows[i] = out
  end
  print_table(rows)
  if #left_out > 0 then
    local names = table.move(left_out, 1, math.min(#left_out, 5), 1, {})
    io.stderr:write(string.format(
      "bvlua runs: %d more config key%s differ%s between the runs, left out to fit %d columns "
        .. "(%s%s); --keys K1,K2 picks the keys, --csv shows them all\n",
      #left_out, #left_out == 1 and "" or "s", #left_out == 1 and "s" or "", columns_total,
      table.concat(names, ", "), #left_out > 5 and ", …" or ""))
  end
end

local function write_json(runs, keys, metric)
  local function number(v)
    if v == nil then return nil end
    if v ~= v or v == math.huge or v == -math.huge then return literal.null end
    return v
  end
  local list = {}
  for _, r in ipairs(runs) do
    local config = {}
    for _, k in ipairs(keys) do config[k] = r.config[k] end
    local row = {run = r.name, step = r.step, metric = metric, last = number(r.last),
                 best = number(r.best), config = config}
    list[#list + 1] = row
  end
  io.stdout:write(list[1] and json.encode(list) or "[]", "\n")
end

local function main(argv)
  local paths, metric, smaller, format, by, key_spec = {}, nil, nil, "table", "last", nil
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      io.stdout:write(M.USAGE, "\n")
      return 0
    elseif a == "--metric" or a == "--keys" then
      local v = cli.value(argv, i)
      if a == "--metric" then metric = v else key_spec = v end
      i = i + 1
    elseif a:match("^%-%-metric=") then
      metric = a:match("^%-%-metric=(.*)$")
    elseif a:match("^%-%-keys=") then
      key_spec = a:match("^%-%-keys=(.*)$")
    elseif a == "--best" then
      by = "best"
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
  local names = run_names(dirs)
  local runs = {}
  for j, dir in ipairs(dirs) do
    runs[j] = {dir = dir, name = names[j], config = flat_config(dir),
               rows = metrics.read(dir .. "/" .. metrics.FILE_NAME)}
  end
  if metric then check_metric(metric, runs) end
  metric = metric or default_metric(runs)
  if smaller == nil then smaller = metric:find("loss") ~= nil or metric:find("pplx") ~= nil end
  for _, r in ipairs(runs) do summarize(r, metric, smaller) end
  local keys = key_spec and chosen_keys(key_spec, runs) or differing_keys(runs)

  -- Best first; runs without a value (or a NaN one) last, then by name.
  table.sort(runs, function(a, b)
    local va, vb = a[by], b[by]
    if va ~= va then va = nil end
    if vb ~= vb then vb = nil end
    if (va == nil) ~= (vb == nil) then return va ~= nil end
    if va ~= nil and va ~= vb then
      if smaller then return va < vb end
      return va > vb
    end
    return a.name < b.name
  end)

  if format == "json" then
    write_json(runs, keys, metric)
    return 0
  end
  local last, best = "last " .. metric, "best " .. metric
  if format == "csv" then
    local fixed = {"run", "step", last, best}
    local labels, header = column_names(keys, fixed), {"run"}
    for _, k in ipairs(keys) do header[#header + 1] = labels[k] end
    table.move(fixed, 2, 4, #header + 1, header)
    io.stdout:write(csv_line(header), "\n")
    for _, r in ipairs(runs) do
      local row = {r.name}
      for _, k in ipairs(keys) do row[#row + 1] = r.config[k] ~= nil and text(r.config[k]) or "" end
      table.move({tostring(math.tointeger(r.step) or r.step), number_text(r.last),
                  number_text(r.best)}, 1, 3, #row + 1, row)
      io.stdout:write(csv_line(row), "\n")
    end
    return 0
  end
  -- On a terminal the metric is named once, and the value it ranks by says so.
  if by == "last" then last, best = last .. " (ranked)", "best" else best = "best (ranked)" end
  local fixed = {{"run", "step", last, best}}
  for _, r in ipairs(runs) do
    fixed[#fixed + 1] = {r.name, tostring(math.tointeger(r.step) or r.step), number_text(r.last),
                         number_text(r.best)}
  end
  write_table(runs, keys, fixed, key_spec ~= nil)
  return 0
end

-- Runs `bvlua runs` with the words after "runs"; returns the exit code.
function M.main(argv) return cli.run("runs", M.USAGE, main, argv) end

M.find_runs, M.run_names, M.default_metric = find_runs, run_names, default_metric

return M
