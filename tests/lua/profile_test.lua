-- bv.profile: the table splits the steps' time between training and the named ranges
-- (evaluations, checkpoints), and profile.range marks a range only while recording.
local T = require "tests.lua.lib.testing"
local profile = require "bv.profile"

-- The table's rows of where the time went: name -> {count, total, mean, share}.
local function rows(text)
  local out = {}
  for name, n, total, mean, share in
      text:gmatch("\n(%S[%S ]-) +(%d+) +([%d.]+) +([%d.]+) +([%d.]+)%%") do
    out[name] = {tonumber(n), tonumber(total), tonumber(mean), tonumber(share)}
  end
  return out
end

local function op(name, self_s, total_s, calls)
  return {name = name, self_s = self_s, total_s = total_s, calls = calls, device = false}
end

T.test("table: training steps without the ranges, each range with its count and mean", function()
  local r = {wall_s = 10.1, steps = 4, steps_s = 10, outside_ops_s = 0.5,
             ops = {op("aten::mm", 2, 2, 8)},
             ranges = {op("eval/val", 0.25, 4, 2), op("eval/test", 0.5, 3, 1),
                       op("checkpoint", 1, 1, 1)}}
  local text = profile.table(r, {title = "Profile of steps 2-5"})
  T.truthy(text:find("Profile of steps 2-5 (4 step(s), 10.000 s)\n", 1, true), text)
  T.eq(rows(text), {["training steps"] = {4, 2, 0.5, 20}, ["eval/val"] = {2, 4, 2, 40},
                    ["eval/test"] = {1, 3, 3, 30}, checkpoint = {1, 1, 1, 10}})
  -- The rows in the order the ranges were first opened, training first.
  local order = {}
  for name in text:gmatch("\n(%S[%S ]-) +%d+ +[%d.]+ +[%d.]+ +[%d.]+%%") do order[#order + 1] = name end
  T.eq(order, {"training steps", "eval/val", "eval/test", "checkpoint"})
  T.truthy(text:find("host ops, by self time (training steps and the ranges above together):",
                     1, true), text)
  T.truthy(text:find("1750.0   17.5%                      (in eval/val, eval/test, checkpoint "
                     .. "but in no op)", 1, true), text)
  T.truthy(text:find("500.0    5.0%                      (in the steps but in no op", 1, true),
           text)
end)

T.test("table: no ranges, one training row; no steps, the ranges' share of the recording", function()
  local text = profile.table({wall_s = 1.1, steps = 2, steps_s = 1, outside_ops_s = 0.1,
                              ops = {op("aten::mm", 0.9, 0.9, 2)}, ranges = {}})
  T.eq(rows(text), {["training steps"] = {2, 1, 0.5, 100}})
  T.truthy(text:find("\nhost ops, by self time:\n", 1, true), text)
  T.truthy(not text:find("but in no op)", 1, true), text)
  text = profile.table({wall_s = 2, steps = 0, steps_s = 0, outside_ops_s = 0,
                        ops = {op("aten::mm", 1, 1, 1)}, ranges = {op("x", 0.1, 0.5, 1)}})
  T.eq(rows(text), {x = {1, 0.5, 0.5, 25}})
  T.truthy(text:find("host ops, by self time (in the ranges above and out of them):", 1, true),
           text)
  text = profile.table({wall_s = 2, steps = 0, steps_s = 0, outside_ops_s = 0, ops = {},
                        ranges = {}})
  T.eq(rows(text), {})
end)

T.test("range: marks a range while recording, else just calls; returns what fn returns", function()
  T.truthy(not bv.profiler.running(), "no recording")
  local a, b, c = profile.range("eval/x", function(p, q) return p + q, nil, "z" end, 1, 2)
  T.eq({a, b, c}, {3, nil, "z"})
  local dir = os.tmpname()
  os.remove(dir)
  bv.fs.mkdirs(dir)
  local m = bv.rand({32, 32}, bv.rng(0))
  local _, r = profile.call(function()
    bv.profiler.step(1)
    profile.range("eval/x", function() return m:matmul(m) end)
    bv.profiler.step(2)
    local x, y = profile.range("eval/x", function() return m:matmul(m), 7 end)
    T.eq(y, 7)
    profile.range("checkpoint", function() return m + 1 end)
  end, dir .. "/t.json")
  T.eq(#r.ranges, 2)
  T.eq({r.ranges[1].name, r.ranges[1].calls, r.ranges[2].name, r.ranges[2].calls},
       {"eval/x", 2, "checkpoint", 1})
  for _, o in ipairs(r.ops) do T.truthy(o.name ~= "eval/x", "a range among the ops") end
  T.truthy(r.ranges[1].total_s + r.ranges[2].total_s + r.outside_ops_s <= r.steps_s + 1e-9,
           "in the steps")
  -- A failing fn: the error goes through, the recording ends its range.
  T.raises(function()
    profile.call(function() profile.range("bad", function() error("boom", 0) end) end,
                 dir .. "/t2.json")
  end, "boom")
  T.truthy(not bv.profiler.running(), "the recording ended")
  T.raises(function() bv.profiler.start(); bv.profiler.step(1); bv.profiler.pop_range() end,
           "no range open")
  bv.profiler.stop(dir .. "/t3.json")
  os.execute("rm -rf '" .. dir .. "'")
end)

T.run()
