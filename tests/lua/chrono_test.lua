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
  clock.t = 9; c:pause(); clock.t = 12; c:resume("eval")
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
                   accum_eval_time = 3.0, accum_examples_seen = 384})
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
  clock.t = 9; c:pause(); clock.t = 12; c:resume("eval")
  clock.t = 20; c:tick(12)
  local saved = json.decode(json.encode(c:state(12)))

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
                    accum_eval_time = 3.0, accum_examples_seen = 480})
  T.near(rec2.values.core_hours, 10 * 4 / 3600, 1e-15)
  T.eq(c2:note(), "Steps:15/100 [15.0%]\nWalltime:27s (3s eval)\nETA:1m25s\nTotal train time:1m40s")
  -- load() resets what the state lacks; examples are truncated to an integer like int().
  c2:load({accum_examples_seen = 7.9})
  T.eq(c2:state(), {accum_program_time = 0.0, accum_train_time = 0.0, accum_pause_time = 0.0,
                    accum_eval_time = 0.0, accum_examples_seen = 7})
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

-- A run of 10 steps (4 cores, batch 32): an initial eval, a checkpoint at step 8 (not a log
-- step), the final eval and checkpoint at step 10.
local function ten_steps(c, clock)
  c:inform({first_step = 0, total_steps = 10, global_bs = 32})
  clock.t = 1; c:pause(); clock.t = 4; c:resume("eval")        -- initial eval: 3 s
  clock.t = 5; c:tick(1)
  clock.t = 6; c:tick(2)                                       -- timing starts
  clock.t = 10; c:tick(6)                                      -- 4 s of training
  clock.t = 12; c:pause()                                      -- checkpoint at step 8
  local saved = json.decode(json.encode(c:state(8)))
  clock.t = 13; c:resume()
  clock.t = 16; c:tick(10)                                     -- 5 s of training, 1 s paused
  clock.t = 17; c:pause(); c:tick(10); clock.t = 20; c:resume("eval")  -- final eval: 3 s
  clock.t = 21; c:pause(); clock.t = 23; c:resume()           -- final checkpoint: 2 s
  clock.t = 24
  return saved
end

T.test("the summary at the end: Walltime includes the final evals, (eval) is their time", function()
  local c, clock, rec = setup()
  c:inform({measure = rec.measure})
  ten_steps(c, clock)
  -- big_vision's note is the last tick's: before the final eval and checkpoint, and its total
  -- train time an estimate (10 s since warm-up for 8 steps: 12.5 s for 10, above Walltime).
  T.eq(c:note(), "Steps:10/10 [100.0%]\nWalltime:16s (3s eval)\nETA:0s\nTotal train time:12s")
  -- Measured at the end: 24 s in all, 6 s of evals (the initial and the final one, not the
  -- checkpoints), 9 s of timed training (4 + 5, what core_hours counts).
  T.eq(c:summary(), "Steps:10/10 [100.0%]\nWalltime:24s (6s eval)\nETA:0s\nTotal train time:9s")
  T.near(rec.values.core_hours, 9 * 4 / 3600, 1e-15)
  -- The tick inside the final eval's pause did nothing (same step); the clock is unchanged.
  T.eq(c:state(), {accum_program_time = 24.0, accum_train_time = 12.0, accum_pause_time = 6.0,
                   accum_eval_time = 6.0, accum_examples_seen = 320})
end)

T.test("state(step) at a checkpoint between log steps: examples and time up to it", function()
  local c, clock, rec = setup()
  c:inform({measure = rec.measure})
  local saved = ten_steps(c, clock)
  -- At t = 12, step 8: 6 s of training since the warm-up (4 + 2 since the tick at step 6),
  -- examples of 8 steps although the last tick was at step 6.
  T.eq(saved, {accum_program_time = 12.0, accum_train_time = 6.0, accum_pause_time = 0.0,
               accum_eval_time = 3.0, accum_examples_seen = 256})
  -- Without a step: the examples of the last tick.
  local c2, clock2 = setup()
  c2:inform({first_step = 0, total_steps = 10, global_bs = 32, measure = rec.measure})
  clock2.t = 1; c2:tick(1)
  T.eq(c2:state().accum_examples_seen, 32)
  T.eq(c2:state(3).accum_examples_seen, 96)
  T.eq(c2:state().accum_program_time, 1.0)  -- during warm-up: this process's time so far
end)

T.test("resumed from a checkpoint: core_hours, examples_seen and Walltime continue, uptime restarts", function()
  local c, clock, rec = setup()
  c:inform({measure = rec.measure})
  local saved = ten_steps(c, clock)
  local whole = {}
  for k, v in pairs(rec.values) do whole[k] = v end

  -- The run was killed after the checkpoint of step 8; a new process (its clock from 0).
  local r, rclock, rrec = setup()
  r:load(saved)
  r:inform({first_step = 8, total_steps = 12, global_bs = 32, measure = rrec.measure})
  rclock.t = 2; r:tick(9)
  T.eq(rrec.values.uptime, 2)                     -- this process's, as big_vision's
  T.eq(rrec.values.examples_seen, 9 * 32)         -- as if never interrupted
  T.eq(rrec.values.core_hours, nil)               -- warming up again
  rclock.t = 3; r:tick(10)
  T.eq(rrec.values.examples_seen, whole.examples_seen)
  rclock.t = 5; r:tick(11)
  T.eq(rrec.values.uptime, 5)
  -- 6 s from the checkpoint and 2 s now, on 4 cores.
  T.near(rrec.values.core_hours, (6 + 2) * 4 / 3600, 1e-15)
  T.near(rrec.values["img/sec/core"], 32 / 2 / 4, 1e-12)
  rclock.t = 6; r:tick(12)
  rclock.t = 7; r:pause(); rclock.t = 9; r:resume("eval")
  rclock.t = 10
  -- 12 s before the checkpoint, 10 s of this process; 3 s + 2 s of evals; 6 + 3 s of training.
  T.eq(r:summary(), "Steps:12/12 [100.0%]\nWalltime:22s (5s eval)\nETA:0s\nTotal train time:9s")

  -- Resuming a finished run (its final evals again): nothing is timed, all is program time.
  local f, fclock = setup()
  f:load({accum_program_time = 100, accum_train_time = 80, accum_eval_time = 10})
  f:inform({first_step = 12, total_steps = 12, global_bs = 32})
  fclock.t = 1; f:pause(); fclock.t = 4; f:resume("eval")
  fclock.t = 5
  T.eq(f:summary(), "Steps:12/12 [100.0%]\nWalltime:1m45s (13s eval)\nETA:0s\nTotal train time:1m20s")
end)

T.test("a tick inside a pause counts the pause once, and not as training", function()
  local c, clock, rec = setup()
  c:inform({first_step = 0, total_steps = 100, global_bs = 32, measure = rec.measure})
  clock.t = 1; c:tick(1)
  clock.t = 2; c:tick(2)
  clock.t = 10; c:pause()
  clock.t = 11; c:tick(3)                          -- as big_vision's evals: pause, then tick
  T.near(rec.values["img/sec/core"], 32 / 8 / 4, 1e-12)  -- 8 s of training, not 9
  clock.t = 15; c:resume("eval")
  clock.t = 20; c:tick(4)
  T.near(rec.values["img/sec/core"], 32 / 5 / 4, 1e-12)  -- 20 - 11 - 4 s paused
  T.eq(c:state(), {accum_program_time = 20.0, accum_train_time = 13.0, accum_pause_time = 5.0,
                   accum_eval_time = 5.0, accum_examples_seen = 128})
end)

T.test("any run and its resumes: Walltime is the time they ran, train time the time stepped", function()
  math.randomseed(19)
  for trial = 1, 200 do
    local total = math.random(1, 30)
    local evals, ckpts = math.random(1, 5), math.random(1, 7)
    -- Each process starts from the last checkpoint, or from scratch; a kill loses what came
    -- after that checkpoint, so Walltime is the time up to the checkpoints resumed from plus
    -- the last process's. Train time: the time outside pauses once a process has warmed up, up
    -- to its last tick (or up to the checkpoint resumed from).
    local step, saved, saved_step, saved_time, saved_train, before = 0, nil, 0, 0, 0, 0
    local c, clock, rec, trained, pending
    repeat
      c, clock, rec = setup()
      if saved then c:load(saved) end
      step, before, trained, pending = saved_step, saved_time, saved_train, 0
      c:inform({first_step = step, total_steps = total, global_bs = 8, measure = rec.measure})
      local function wait(paused)
        local dt = math.random() * 3
        clock.t = clock.t + dt
        if not paused and c.warmup == 0 then pending = pending + dt end
      end
      local function tick()
        local timed = c.warmup == 0 and step ~= c.prev_step
        c:tick(step)
        if timed then trained, pending = trained + pending, 0 end
      end
      local function eval() c:pause(); wait(true); tick(); wait(true); c:resume("eval") end
      wait()
      if step == 0 or step == total then eval() end
      local killed = false
      while step < total and not killed do
        step = step + 1
        wait()
        if step <= 2 or step % 3 == 0 or step == total then tick() end
        if step % evals == 0 or step == total then eval() end
        if step % ckpts == 0 or step == total then
          c:pause(); wait(true)
          saved, saved_step = json.decode(json.encode(c:state(step))), step
          saved_time, saved_train = before + clock.t, trained + pending
          c:resume()
        end
        killed = step < total and math.random() < 0.1
      end
    until not killed
    clock.t = clock.t + 0.5
    local t = c:_totals(clock.t)
    local what = string.format("trial %d (%d steps)", trial, total)
    T.near(t.program, before + clock.t, 1e-9, what .. ": Walltime")
    T.near(c.accum_train_time, trained, 1e-9, what .. ": train time")
    T.truthy(c.accum_train_time + t.eval <= t.program + 1e-9, what .. ": train + eval <= Walltime")
    if rec.values.examples_seen then T.eq(rec.values.examples_seen, 8 * total, what) end
  end
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
