-- bvlua plot: the figure big_vision's GPU tutorial draws from big_vision_metrics.txt, for one
-- run or several overlaid (a colour per run): training loss and an eval metric (right axis,
-- dashed) against epoch, img/sec/core against step, and the z/secs timings against step. Or any
-- panels asked for with --x KEY --y KEY. PNG or SVG, drawn with cairo (runtime/plot/figure.h).
local cli = require "bv.commands.cli"
local metrics = require "bv.metrics"
local runs = require "bv.commands.runs"

local M = {}

M.USAGE = [==[
usage: bvlua plot DIR... [-o FILE.png|FILE.svg] [--metric KEY] [--x KEY --y KEY]...

DIR is a workdir (it holds big_vision_metrics.txt) or a directory of workdirs. By default the
figure has the tutorial's panels: training_loss and an eval metric (--metric, default the first
ending in prec@1 or acc; right axis, dashed) against epoch, img/sec/core against step, and every
z/secs/* timing against step. Each --x KEY --y KEY pair replaces them with a panel of its own.

options:
  -o FILE       the picture to write, .png or .svg (default plot.png)
  --metric KEY  the eval metric of the first panel
  --x KEY, --y KEY   a panel of KEY (y) against KEY (x); repeat for more panels
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

local function main(argv)
  local paths, out, metric, pairs_xy, x = {}, "plot.png", nil, {}, nil
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "-h" or a == "--help" then
      io.stdout:write(M.USAGE, "\n")
      return 0
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

  local found = runs.find_runs(paths)
  local data = {}
  for r, dir in ipairs(found) do
    data[r] = {name = dir, rows = metrics.read(dir .. "/big_vision_metrics.txt")}
  end
  -- Runs are named by their paths without the directories all of them share.
  local prefix = #found > 1 and found[1]:match("^(.*/)") or ""
  for _, dir in ipairs(found) do
    while prefix ~= "" and dir:sub(1, #prefix) ~= prefix do prefix = prefix:match("^(.*/).+/$") or "" end
  end
  for _, run in ipairs(data) do run.label = run.name:sub(#prefix + 1) end
  metric = metric or runs.default_metric(data[1].rows)

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
        p.series[#p.series + 1] = {name = several and "" or run.label, color = r - 1, x = xs, y = ys}
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
      loss.series[#loss.series + 1] = {name = several and "" or "training_loss",
                                       color = r - 1, x = xs, y = ys}
      xs, ys = points(run.rows, "epoch", metric)
      loss.series_right[#loss.series_right + 1] = {name = several and "" or metric,
                                                   color = r - 1, x = xs, y = ys}
      xs, ys = points(run.rows, "step", "img/sec/core")
      speed.series[#speed.series + 1] = {name = several and "" or run.label, color = r - 1,
                                         x = xs, y = ys}
      for k_i, k in ipairs(keys) do
        xs, ys = points(run.rows, "step", k)
        secs.series[#secs.series + 1] = {name = several and "" or k:sub(8),
                                         color = several and r - 1 or k_i - 1,
                                         dash = several and k_i - 1 or 0, x = xs, y = ys}
      end
    end
    if not has_points(loss.series) then
      error("no training_loss with an epoch in the metrics files (big_vision_metrics.txt)", 0)
    end
    panels = {loss, speed, secs}
  end
  bv._plot.save({panels = panels, legend = legend, columns = #panels >= 3 and 3 or #panels},
                out)
  io.stdout:write("bvlua plot: wrote ", out, "\n")
  return 0
end

function M.main(argv) return cli.run("plot", M.USAGE, main, argv) end

return M
