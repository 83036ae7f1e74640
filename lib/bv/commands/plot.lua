-- bvlua plot: the figure big_vision's GPU tutorial draws from big_vision_metrics.txt, for one
-- run or several overlaid (a colour per run): training loss and an eval metric (right axis,
-- dashed) against epoch, img/sec/core against step, and the z/secs timings against step. Or any
-- panels asked for with --x KEY --y KEY. PNG or SVG, drawn with cairo (runtime/plot/figure.h).
local cli = require "bv.commands.cli"
local metrics = require "bv.metrics"
local runs = require "bv.commands.runs"
local suggest = require "bv.suggest"

local M = {}

M.USAGE = [==[
usage: bvlua plot DIR... [-o FILE.png|FILE.svg] [--metric KEY] [--x KEY --y KEY]... [-v]

DIR is a workdir (it holds big_vision_metrics.txt) or a directory of workdirs. By default the
figure has the tutorial's panels: training_loss and an eval metric (--metric, default the first
ending in prec@1 or acc; right axis, dashed) against epoch, img/sec/core against step, and every
z/secs/* timing against step. Each --x KEY --y KEY pair replaces them with a panel of its own.
Series of at most 30 points (evaluations) get a dot on each point, and in the legend.

options:
  -o FILE       the picture to write, .png or .svg (default plot.png)
  --metric KEY  the eval metric of the first panel
  --x KEY, --y KEY   a panel of KEY (y) against KEY (x); repeat for more panels
  -v, --verbose also print what was drawn: each panel's axis ranges and ticks, its series'
                points and its legend entries
  -h, --help    this text]==]

-- The (x, y) points of the rows that have both keys.
local function points(rows, xkey, ykey)
  local xs, ys = {}, {}
  for _, row in ipairs(rows) do
    local x, y = row[xkey], row[ykey]
    if type(x) == "number" and type(y) == "number" then xs[#xs + 1], ys[#ys + 1] = x, y end
  end
  return xs, ys
end

local function has_points(list)
  for _, s in ipairs(list) do
    if #s.x > 0 then return true end
  end
  return false
end

-- The initial evaluation is logged at step 0, before the trainer's clock first ticks: its line
-- has no epoch. It is epoch 0.
local function fill_epoch(rows)
  for _, row in ipairs(rows) do
    if row.epoch == nil and row.step == 0 then row.epoch = 0 end
  end
end

local function files_of(data)
  if #data == 1 then return data[1].name .. "/" .. metrics.FILE_NAME end
  return string.format("the %d runs' %s", #data, metrics.FILE_NAME)
end

-- An error for a key that no run logged, with the keys it may have meant.
local function unknown_key(what, key, data)
  local seen, keys = {}, {}
  for _, run in ipairs(data) do
    for _, row in ipairs(run.rows) do
      for k in pairs(row) do
        if not seen[k] then seen[k], keys[#keys + 1] = true, k end
      end
    end
  end
  table.sort(keys)
  local hint = suggest.did_you_mean(key, keys)
  -- A part of a name (eval/acc of eval/acc/prec@1), or a typo in one (eval/acx): the keys that
  -- hold it, or that start with the nearest of their first as many /-parts.
  local _, slashes = key:gsub("/", "")
  local heads, seen_head = {}, {}
  for _, k in ipairs(keys) do
    local head = k:match("^" .. string.rep("[^/]*/", slashes) .. "[^/]*")
    if head and not seen_head[head] then seen_head[head], heads[#heads + 1] = true, head end
  end
  local head = suggest.closest(key, heads)
  local near = {}
  for _, k in ipairs(keys) do
    local holds = k:find(key, 1, true) or (head and k:sub(1, #head + 1) == head .. "/")
    if hint == "" and holds and #near < 5 then near[#near + 1] = "'" .. k .. "'" end
  end
  if #near > 0 then
    hint = " (did you mean " .. (#near > 1 and "one of " or "") .. table.concat(near, ", ") .. "?)"
  end
  if hint == "" then
    hint = " (its keys: " .. table.concat(keys, ", ", 1, math.min(#keys, 12))
           .. (#keys > 12 and string.format(", and %d more)", #keys - 12) or ")")
  end
  error(string.format("%s '%s' is not in %s%s", what, key, files_of(data), hint), 0)
end

local function logged(key, data)
  for _, run in ipairs(data) do
    for _, row in ipairs(run.rows) do
      if row[key] ~= nil then return true end
    end
  end
  return false
end

local function num(v) return string.format("%.6g", v) end

-- -v: what was drawn, panel by panel (`drawn` is bv._plot.save's answer).
local function describe(panels, drawn)
  local out = {}
  local function axis(label, key, a)
    out[#out + 1] = string.format("  %s %s: %s to %s, ticks %s", label, key, num(a.lo), num(a.hi),
                                  table.concat(a.ticks, " "))
  end
  for p_i, p in ipairs(panels) do
    local d = drawn.panels[p_i]
    out[#out + 1] = string.format("panel %d: %s", p_i, p.title)
    axis("x", p.xlabel, d.x)
    axis("y", p.ylabel, d.y)
    if d.y_right then axis("right", p.ylabel_right, d.y_right) end
    for _, list in ipairs({p.series, p.series_right or {}}) do
      for _, s in ipairs(list) do
        if s.what then
          local line = string.format("  series %s: %d point%s", s.what, #s.x,
                                     #s.x == 1 and "" or "s")
          if #s.x > 0 then
            line = line .. string.format(", %s %s to %s", p.xlabel, num(s.x[1]), num(s.x[#s.x]))
          end
          out[#out + 1] = line
        end
      end
    end
    for _, l in ipairs(d.legend) do
      out[#out + 1] = string.format("  legend '%s' at %d,%d%s", l.name, math.floor(l.x + 0.5),
                                    math.floor(l.y + 0.5), l.marker and ", marked" or "")
    end
  end
  for _, l in ipairs(drawn.legend) do
    out[#out + 1] = string.format("legend '%s' at %d,%d%s", l.name, math.floor(l.x + 0.5),
                                  math.floor(l.y + 0.5), l.marker and ", marked" or "")
  end
  io.stdout:write(table.concat(out, "\n"), "\n")
end

local function main(argv)
  local paths, out, metric, pairs_xy, x, verbose = {}, "plot.png", nil, {}, nil, false
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      io.stdout:write(M.USAGE, "\n")
      return 0
    elseif a == "-v" or a == "--verbose" then
      verbose = true
    elseif a == "-o" or a == "--metric" or a == "--x" or a == "--y" then
      local v = cli.value(argv, i)
      if a == "-o" then
        out = v
      elseif a == "--metric" then
        metric = v
      elseif a == "--x" then
        x = v
      elseif not x then
        cli.usage("--y " .. v .. " needs an --x KEY before it")
      else
        pairs_xy[#pairs_xy + 1] = {x, v}
      end
      i = i + 1
    elseif a:sub(1, 1) == "-" then
      cli.usage("unknown option " .. a)
    else
      paths[#paths + 1] = a
    end
    i = i + 1
  end
  if #paths == 0 then cli.usage("no DIR given") end

  local named = {}
  for _, p in ipairs(paths) do named[(p:gsub("(.)/+$", "%1"))] = true end
  local found, data = {}, {}
  for _, dir in ipairs(runs.find_runs(paths)) do
    local file = dir .. "/" .. metrics.FILE_NAME
    local rows = metrics.read(file)
    if #rows > 0 then
      fill_epoch(rows)
      found[#found + 1] = dir
      data[#data + 1] = {name = dir, rows = rows}
    elseif named[dir] then
      error(file .. " holds no metrics: the run has not logged a step yet", 0)
    else  -- a run of a sweep that has only just started: the others are drawn
      io.stderr:write("bvlua plot: skipping ", dir, ": its ", metrics.FILE_NAME,
                      " holds no metrics yet\n")
    end
  end
  if #data == 0 then
    error("no run under " .. table.concat(paths, ", ") .. " has logged a metric yet", 0)
  end
  -- Runs are named as `bvlua runs` names them, and the eval metric is its default one: the
  -- first that any run logged (the first run of a sweep may not have evaluated yet).
  local labels = runs.run_names(found)
  for r, run in ipairs(data) do run.label = labels[r] end
  if metric and not logged(metric, data) then unknown_key("--metric", metric, data) end
  metric = metric or runs.default_metric(data)
  for _, xy in ipairs(pairs_xy) do
    if not logged(xy[1], data) then unknown_key("--x", xy[1], data) end
    if not logged(xy[2], data) then unknown_key("--y", xy[2], data) end
  end

  local several = #data > 1
  local panels, legend = {}, {}
  if several then  -- one legend under the panels names each run's colour
    for r, run in ipairs(data) do legend[r] = {name = run.label, color = r - 1, x = {}, y = {}} end
  end
  -- A legend entry inside a panel that names a line style, not a run.
  local function style(name, dash) return {name = name, color = -1, dash = dash, x = {}, y = {}} end
  if #pairs_xy > 0 then
    for _, xy in ipairs(pairs_xy) do
      local p = {title = xy[2] .. " against " .. xy[1], xlabel = xy[1], ylabel = xy[2], series = {}}
      for r, run in ipairs(data) do
        local xs, ys = points(run.rows, xy[1], xy[2])
        p.series[#p.series + 1] = {name = several and "" or run.label, color = r - 1,
                                   x = xs, y = ys, what = run.label}
      end
      if not has_points(p.series) then
        error(string.format("no line of the metrics holds both '%s' and '%s'", xy[1], xy[2]), 0)
      end
      panels[#panels + 1] = p
    end
  else
    local loss = {title = "training loss and " .. metric, xlabel = "epoch",
                  ylabel = "training_loss", ylabel_right = metric, series = {}, series_right = {}}
    local speed = {title = "img/sec/core", xlabel = "step", ylabel = "img/sec/core", series = {}}
    local secs = {title = "timings (z/secs)", xlabel = "step", ylabel = "seconds", series = {}}
    if several then
      loss.series[1], loss.series_right[1] = style("training_loss", 0), style(metric, 1)
    end
    -- The z/secs keys of all runs: with several runs a key is a line style, a run a colour.
    local keys = {}
    for _, run in ipairs(data) do
      for _, row in ipairs(run.rows) do
        for k in pairs(row) do
          if k:find("^z/secs/") and not keys[k] then keys[#keys + 1], keys[k] = k, true end
        end
      end
    end
    table.sort(keys)
    if several then
      for k_i, k in ipairs(keys) do secs.series[k_i] = style(k:sub(8), k_i - 1) end
    end
    for r, run in ipairs(data) do
      local xs, ys = points(run.rows, "epoch", "training_loss")
      local of = " of " .. run.label
      loss.series[#loss.series + 1] = {name = several and "" or "training_loss",
                                       color = r - 1, x = xs, y = ys, what = "training_loss" .. of}
      xs, ys = points(run.rows, "epoch", metric)
      loss.series_right[#loss.series_right + 1] = {name = several and "" or metric,
                                                   color = r - 1, x = xs, y = ys,
                                                   what = metric .. of}
      xs, ys = points(run.rows, "step", "img/sec/core")
      speed.series[#speed.series + 1] = {name = several and "" or run.label, color = r - 1,
                                         x = xs, y = ys, what = "img/sec/core" .. of}
      for k_i, k in ipairs(keys) do
        xs, ys = points(run.rows, "step", k)
        secs.series[#secs.series + 1] = {name = several and "" or k:sub(8),
                                         color = several and r - 1 or k_i - 1,
                                         dash = several and k_i - 1 or 0, x = xs, y = ys,
                                         what = k .. of}
      end
    end
    if not has_points(loss.series) then
      error(string.format("no line of %s holds training_loss and epoch: the run has not logged "
                          .. "a training step yet (--x/--y draw other keys)", files_of(data)), 0)
    end
    panels = {loss, speed, secs}
  end
  local drawn = bv._plot.save({panels = panels, legend = legend,
                               columns = #panels >= 3 and 3 or #panels}, out)
  if verbose then describe(panels, drawn) end
  io.stdout:write("bvlua plot: wrote ", out, "\n")
  return 0
end

function M.main(argv) return cli.run("plot", M.USAGE, main, argv) end

return M
