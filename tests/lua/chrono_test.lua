-- bv.chrono: big_vision's Chrono driven by a fake clock, so every number is known by hand.
-- percent strings were checked against Python (f"{x:.1%}"); hms is big_vision's, rounded
-- before it is split.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local chrono_mod = require "bv.chrono"

-- A clock the test moves by hand, and a recorder for measure/write_note.
local function setup(opts)
  local clock = {t = 0}
  opts = opts or {}
  local c = chrono_mod.new({clock = function() return clock.t end, device_count = opts.devices or 4,
                            device_kind = opts.kind, memory = opts.memory or false})
  local rec = {names = {}, values = {}, notes = {}}
  function rec.measure(name, value)
    rec.names[#rec.names + 1] = name
    rec.values[name] = value
  end
  function rec.write_note(s) rec.notes[#rec.notes + 1] = s end
  function rec.reset() rec.names, rec.values = {}, {} end
  return c, clock, rec
end

T.test("hms formats like big_vision, but never '2m60s' (rounded before it is split)", function()
  local cases = {
    {0, "0s"}, {0.5, "0s"}, {1.5, "2s"}, {2.5, "2s"}, {59.4, "59s"}, {59.5, "1m0s"},
    {60, "1m0s"}, {90.5, "1m30s"}, {179.7, "3m0s"}, {3599, "59m59s"}, {3599.6, "1h0m"},
    {3600, "1h0m"}, {3661, "1h1m"}, {7199.9, "2h0m"}, {89939, "24h59m"}, {89999, "1d1h0m"},
    {90000, "1d1h0m"}, {100000, "1d3h47m"}, {1e6, "11d13h47m"},
  }
  for _, c in ipairs(cases) do T.eq(chrono_mod.hms(c[1]), c[2], "hms(" .. c[1] .. ")") end
end)

T.test("warm-up, speed, core hours, pauses and the note, by hand", function()
  local c, clock, rec = setup()
  T.eq(c:note(), "Chrono n/a")
  c:inform({first_step = 0, total_steps = 100, global_bs = 32, steps_per_epoch = 10,
            measure = rec.measure, write_note = rec.write_note})
  T.eq(c:note(), "Steps:0/100 [0.0%]")
  T.eq(c.warmup, 2)

  -- First tick (t=5): examples are counted, no timing; the note is written as it is.
  clock.t = 5
  c:tick(1)
  T.eq(rec.names, {"uptime", "examples_seen", "progress", "epoch"})
  T.eq(rec.values.uptime, 5)
  T.eq(rec.values.examples_seen, 32)
  T.near(rec.values.progress, 0.01, 1e-15)
  T.near(rec.values.epoch, 0.1, 1e-15)
  T.eq(rec.notes, {"Steps:0/100 [0.0%]"})
  T.eq(c.warmup, 1)

  -- A pause during warm-up is dropped when timing starts.
  clock.t = 6; c:pause(); clock.t = 7; c:resume()
  T.eq(c.paused_time, 1)
  rec.reset()
  clock.t = 8
  c:tick(2)                                     -- timing starts here
  T.eq(rec.names, {"uptime", "examples_seen", "progress", "epoch"})
  T.eq(rec.values.examples_seen, 64)
  T.eq(c.warmup, 0)
  T.eq(c.paused_time, 0)
  T.eq(c:state().accum_program_time, 8.0)       -- start-up and warm-up: program time only
  T.eq(c:state().accum_train_time, 0.0)

  c:tick(2)                                     -- the same step again (evals tick): nothing
  T.eq(#rec.names, 4)

  -- 3 s of eval inside the next interval are not training time.
  clock.t = 9; c:pause(); clock.t = 12; c:resume()
  T.raises(function() c:resume() end, "resume() without pause()")
  rec.reset()
  clock.t = 20
  c:tick(12)
  T.eq(rec.names, {"uptime", "examples_seen", "progress", "epoch", "img/sec/core",
                   "core_hours_cpu", "core_hours"})
  T.eq(rec.values.uptime, 20)
  T.eq(rec.values.examples_seen, 384)           -- 12 steps * 32
  T.near(rec.values.progress, 0.12, 1e-15)
  T.near(rec.values.epoch, 1.2, 1e-15)
  -- dt = 20 - 8 - 3 = 9 s for 10 steps of 32 on 4 cores.
  T.near(rec.values["img/sec/core"], 32 * 10 / 9 / 4, 1e-12)
  T.near(rec.values.core_hours, 9 * 4 / 3600, 1e-15)
  T.eq(rec.values.core_hours_cpu, rec.values.core_hours)
  T.eq(c:state(), {accum_program_time = 20.0, accum_train_time = 9.0, accum_pause_time = 3.0,
                   accum_examples_seen = 384})
  -- ETA: 12 s since warm-up for 10 steps, 88 to go: 105.6 s; total: 120 s.
  T.eq(c:note(), "Steps:12/100 [12.0%]\nWalltime:20s (3s eval)\nETA:1m46s\nTotal train time:2m0s")
  T.eq(rec.notes[#rec.notes], c:note())

  T.raises(function() c:pause(); c:pause() end, "don't pause twice")
end)

T.test("log_timing measures once; log_timing_avg is averaged at the next tick", function()
  local c, clock, rec = setup()
  c:inform({first_step = 0, total_steps = 10, global_bs = 2, measure = rec.measure})
  local a, b = c:log_timing("z/secs/eval/val", function() clock.t = clock.t + 2.5; return 1, 2 end)
  T.eq({a, b}, {1, 2})
  T.eq(rec.names, {"z/secs/eval/val"})
  T.eq(rec.values["z/secs/eval/val"], 2.5)
  c:log_timing("z/secs/update0", function() clock.t = clock.t + 1 end, {noop = true})
  T.eq(#rec.names, 1)
  rec.reset()
  c:log_timing_avg("pp", function() clock.t = clock.t + 1 end)
  c:log_timing_avg("pp", function() clock.t = clock.t + 3 end)
  c:log_timing_avg("zz", function() clock.t = clock.t + 4 end)
  T.eq(#rec.names, 0)
  c:tick(1)
  -- No steps_per_epoch: no epoch measurement.
  T.eq(rec.names, {"uptime", "pp", "zz", "examples_seen", "progress"})
  T.eq(rec.values.pp, 2)
  T.eq(rec.values.zz, 4)
  rec.reset()
  c:tick(2)
  T.eq(rec.names, {"uptime", "examples_seen", "progress"})   -- flushed once only
  -- An error inside the block propagates and measures nothing.
  rec.reset()
  T.raises(function() c:log_timing("boom", function() error("inner failure") end) end,
           "inner failure")
  T.eq(#rec.names, 0)
end)

T.test("state survives a JSON round trip and a resumed run keeps accumulating", function()
  local c, clock, rec = setup()
  c:inform({first_step = 0, total_steps = 100, global_bs = 32, steps_per_epoch = 10,
            measure = rec.measure})
  clock.t = 5; c:tick(1)
  clock.t = 8; c:tick(2)
  clock.t = 9; c:pause(); clock.t = 12; c:resume()
  clock.t = 20; c:tick(12)
  local saved = json.decode(json.encode(c:state()))

  -- A new process: its clock starts again at 0.
  local c2, clock2, rec2 = setup()
  c2:load(saved)
  T.eq(c2:state(), c:state())
  c2:inform({first_step = 12, total_steps = 100, global_bs = 32, steps_per_epoch = 10,
             measure = rec2.measure})
  T.eq(c2:note(), "Steps:12/100 [12.0%]")
  clock2.t = 4; c2:tick(13)
  T.eq(rec2.values.examples_seen, 416)
  clock2.t = 6; c2:tick(14)
  clock2.t = 7; c2:tick(15)
  T.eq(c2:state(), {accum_program_time = 27.0, accum_train_time = 10.0, accum_pause_time = 3.0,
                    accum_examples_seen = 480})
  T.near(rec2.values.core_hours, 10 * 4 / 3600, 1e-15)
  T.eq(c2:note(), "Steps:15/100 [15.0%]\nWalltime:27s (3s eval)\nETA:1m25s\nTotal train time:1m40s")
  -- load() resets what the state lacks; examples are truncated to an integer like int().
  c2:load({accum_examples_seen = 7.9})
  T.eq(c2:state(), {accum_program_time = 0.0, accum_train_time = 0.0, accum_pause_time = 0.0,
                    accum_examples_seen = 7})
  T.eq(math.type(c2:state().accum_examples_seen), "integer")
  T.raises(function() c2:load({accum_train_time = "x"}) end, "accum_train_time")
end)

T.test("defaults: bv.threads() cores, host memory after warm-up", function()
  local clock = {t = 0}
  local c = chrono_mod.new({clock = function() return clock.t end})
  local names, values = {}, {}
  c:inform({first_step = 0, total_steps = 10, global_bs = 8,
            measure = function(n, v) names[#names + 1] = n; values[n] = v end})
  clock.t = 1; c:tick(1)
  clock.t = 2; c:tick(2)
  clock.t = 4; c:tick(3)
  T.near(values["img/sec/core"], 8 / 2 / bv.threads(), 1e-12)
  T.near(values.core_hours, 2 * bv.threads() / 3600, 1e-15)
  T.eq({names[#names - 2], names[#names - 1], names[#names]},
       {"y/hostmem/total", "y/hostmem/available", "y/hostmem/used"})
  T.truthy(values["y/hostmem/total"] > 0 and values["y/hostmem/used"] > 0
           and values["y/hostmem/available"] <= values["y/hostmem/total"], "sane host memory")
  -- A replacement memory function.
  local c3, clock3, rec3 = setup({memory = function(m) m("y/custom", 1) end, kind = "x"})
  c3:inform({first_step = 0, total_steps = 10, global_bs = 8, measure = rec3.measure})
  clock3.t = 1; c3:tick(1); clock3.t = 2; c3:tick(2); clock3.t = 3; c3:tick(3)
  T.eq(rec3.names[#rec3.names], "y/custom")
  T.truthy(rec3.values.core_hours_x ~= nil, "core_hours_<device_kind>")
end)

T.test("tick before inform is an error naming what is missing", function()
  local c = setup()
  T.raises(function() c:tick(1) end, "inform({measure")
  c:inform({measure = function() end})
  T.raises(function() c:tick(1) end, "first_step")
  c:inform({first_step = 0})
  T.raises(function() c:tick(1) end, "total_steps")
  -- As in big_vision, 0 means "not given" for total_steps (but first_step 0 is a step).
  c:inform({total_steps = 0, global_bs = 4})
  T.raises(function() c:tick(1) end, "total_steps")
end)

T.run()
