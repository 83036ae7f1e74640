-- bv.chrono: big_vision's Chrono (utils.Chrono): training speed, progress, time accounting.
--
--   local chrono = require("bv.chrono").new()
--   chrono:inform({first_step = 0, total_steps = 1000, global_bs = 512,
--                  steps_per_epoch = ntrain / 512, measure = function(n, v) mw:measure(n, v) end,
--                  write_note = function(s) print("NOTE: " .. s) end})
--   chrono:tick(step)                          -- at every logged step
--   chrono:pause(); ...checkpoint...; chrono:resume()
--   chrono:pause(); chrono:tick(step); ...eval...; chrono:resume("eval")
--   chrono:log_timing("z/secs/eval/val", function() ... end)
--   ckpt_state.chrono = chrono:state(step)    -- and chrono:load(state) on resume
--   print("Done!\n" .. chrono:summary())      -- at the end of the run
--
-- Three kinds of time, as in big_vision: train time (between ticks, minus pauses), pause time
-- (evals, checkpoints) and program time (both, plus start-up). The first two ticks are warm-up
-- (`chrono.warmup` goes 2 -> 1 -> 0): the first step includes start-up costs and would distort
-- the speed, so timing starts at the second tick. Besides big_vision's, eval time: the pauses
-- ended with resume("eval"), initial and final evals included (the note's "(Ns eval)").
--
-- Across a resume, as big_vision's Chrono: the accumulators (program, train, pause and eval
-- time, examples seen) go into the checkpoint and continue from there, so core_hours,
-- examples_seen and the summary's Walltime count every process; `uptime` is this process's
-- (big_vision's program_start_time is the moment its Chrono was made) and every process warms
-- up again. Unlike big_vision's save(), state(step) counts up to the moment it is called (the
-- examples of the steps since the last tick, the time since then), so a checkpoint at a step
-- that is not a log step loses nothing.
--
-- Speed is reported per "core" as `img/sec/core` and `core_hours`, where big_vision divides by
-- jax.device_count(). Here the device count is opts.device_count, by default bv.threads(): on
-- the CPU a "core" is one libtorch intra-op thread. `core_hours_<device_kind>` uses
-- opts.device_kind (default "cpu", jax's name for CPU devices).
--
-- Public fields read by trainers: warmup, prev_step, total_steps, global_bs, steps_per_epoch.
local M = {}

-- Python's f"{x:.0f}" (round half to even, like C's printf; nan/inf spelled as Python does).
local function f0(x)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  return string.format("%.0f", x)
end

-- Python's round(): to the nearest integer, halves to the even one (also TFDS's percent
-- boundaries, bv.tfds_splits).
local function round_even(x)
  local f = math.floor(x)
  local r = x - f
  if r > 0.5 or (r == 0.5 and f % 2 == 1) then f = f + 1 end
  return math.tointeger(f) or f
end
M.round_even = round_even

-- big_vision's hms(): "42s", "3m7s", "5h12m" (below 25 hours), else "2d3h4m". Unlike
-- big_vision, which rounds each part on its own ("2m60s"), the time is rounded to whole
-- seconds (minutes from an hour up) before it is split.
function M.hms(s)
  if s ~= s or s == math.huge or s == -math.huge then return f0(s) .. "s" end
  local secs = round_even(s)
  if secs < 60 then return string.format("%ds", secs) end
  if secs < 3600 then return string.format("%dm%ds", secs // 60, secs % 60) end
  local mins = round_even(s / 60)
  local h, m = mins // 60, mins % 60
  if h < 25 then return string.format("%dh%dm", h, m) end
  return string.format("%dd%dh%dm", h // 24, h % 24, m)
end

-- Python's f"{x}" for a step count: 5, or 5.0 for a float.
local function num_str(x)
  if math.type(x) == "integer" then return string.format("%d", x) end
  return require("bv.json").format_float(x)
end

local function steps_note(step, total)
  return string.format("Steps:%s/%s [%s]", num_str(step), num_str(total),
                       string.format("%.1f%%", step / total * 100))
end

-- Python truthiness of an optional number: nil, false and 0 are "not given".
local function given(x)
  return x ~= nil and x ~= false and x ~= 0
end

-- Host memory as psutil.virtual_memory() reports it on Linux, in bytes; nil when
-- /proc/meminfo can't be read.
local function host_memory()
  local f = io.open("/proc/meminfo", "r")
  if not f then return nil end
  local kb = {}
  for line in f:lines() do
    local k, v = line:match("^([%w_()]+):%s+(%d+)")
    if k then kb[k] = tonumber(v) * 1024 end
  end
  f:close()
  if not kb.MemTotal then return nil end
  local total, free = kb.MemTotal, kb.MemFree or 0
  local cached = (kb.Cached or 0) + (kb.SReclaimable or 0)
  local used = total - free - cached - (kb.Buffers or 0)
  if used < 0 then used = total - free end
  return {total = total, available = kb.MemAvailable or free, used = used}
end

-- big_vision's log_memory(): y/hostmem/{total,available,used}. There is no device memory to
-- report on the CPU (big_vision's y/devmem/* comes from accelerators).
local function log_memory(measure)
  local mem = host_memory()
  if not mem then return end
  measure("y/hostmem/total", mem.total)
  measure("y/hostmem/available", mem.available)
  measure("y/hostmem/used", mem.used)
end
M.log_memory = log_memory

local Chrono = {}
Chrono.__index = Chrono

-- opts.clock: a function returning seconds (default bv.clock, monotonic); tests drive time
-- with their own. opts.device_count (default bv.threads()), opts.device_kind (default "cpu").
-- opts.memory: false turns off the y/hostmem/* measurements, or a function(measure) replaces
-- them. The program's start is the moment of new(): create the Chrono early.
function M.new(opts)
  opts = opts or {}
  local self = setmetatable({}, Chrono)
  self._clock = opts.clock or bv.clock
  self._device_count = opts.device_count
  self._device_kind = opts.device_kind or "cpu"
  if opts.memory == false then
    self._log_memory = function() end
  else
    self._log_memory = opts.memory or log_memory
  end
  self._timing_names, self._timing_history = {}, {}

  self.program_start_time = self._clock()
  self.train_start_time = nil
  self.train_start_step = nil
  self.prev_time = nil
  self.prev_step = nil
  self.pause_start = nil
  self.paused_time = 0
  self._pause_began = nil  -- pause_start before tick() moved it (eval time counts from here)
  self.total_steps = nil
  self.global_bs = nil
  self.steps_per_epoch = nil
  self.warmup = 2
  self:load()
  self._note = "Chrono n/a"
  return self
end

-- Gives what becomes known later in the program; call it as often as needed with any subset.
-- As in big_vision, a 0 for total_steps, global_bs or steps_per_epoch counts as not given;
-- first_step may be 0.
function Chrono:inform(info)
  info = info or {}
  if info.first_step ~= nil then self.prev_step = info.first_step end
  if given(info.total_steps) then self.total_steps = info.total_steps end
  if given(info.steps_per_epoch) then self.steps_per_epoch = info.steps_per_epoch end
  if given(info.global_bs) then self.global_bs = info.global_bs end
  if info.measure then self._measure = info.measure end
  if info.write_note then self._write_note = info.write_note end
  if self.total_steps and self.prev_step ~= nil then
    self._note = steps_note(self.prev_step, self.total_steps)
  end
end

-- The progress note: "Chrono n/a" until inform() knows the steps, then "Steps:s/t [p%]", and
-- after warm-up also Walltime, ETA and Total train time.
function Chrono:note()
  return self._note
end

function Chrono:_device_count_now()
  return self._device_count or bv.threads()
end

-- Measures the averaged log_timing_avg timings (each once, in first-use order) and clears them.
function Chrono:flush_timings(measure)
  measure = measure or self._measure
  if not measure then error("chrono: no measure function; call inform({measure = ...})", 2) end
  for _, name in ipairs(self._timing_names) do
    local times, sum = self._timing_history[name], 0
    for _, t in ipairs(times) do sum = sum + t end
    measure(name, sum / #times)
  end
  self._timing_names, self._timing_history = {}, {}
end

-- A tick at `step`: measures uptime, averaged timings, examples_seen, progress, epoch and,
-- after warm-up, img/sec/core, core_hours_<kind>, core_hours and host memory; updates the
-- note. A tick at the step of the previous one does nothing (evals tick too).
function Chrono:tick(step, measure, write_note)
  if step == self.prev_step then return end
  measure = measure or self._measure
  write_note = write_note or self._write_note or function() end
  if not measure then error("chrono: tick before inform({measure = ...})", 2) end
  if self.prev_step == nil then error("chrono: tick before inform({first_step = ...})", 2) end
  if not self.total_steps or not self.global_bs then
    error("chrono: tick before inform({total_steps = ..., global_bs = ...})", 2)
  end

  local now = self._clock()
  if self.pause_start ~= nil then
    -- A tick inside a pause (evals tick after pausing, as big_vision's): the pause so far is
    -- this interval's pause time, not train time, and the rest of it goes to the next interval.
    self.paused_time = self.paused_time + (now - self.pause_start)
    self.pause_start = now
  end
  measure("uptime", now - self.program_start_time)
  self:flush_timings(measure)

  -- Examples are always counted, warm-up or not.
  local ds = step - self.prev_step
  self.prev_step = step
  self.accum_examples_seen = self.accum_examples_seen + ds * self.global_bs
  measure("examples_seen", self.accum_examples_seen)
  measure("progress", step / self.total_steps)
  if given(self.steps_per_epoch) then measure("epoch", step / self.steps_per_epoch) end

  if self.warmup > 1 then
    self.warmup = self.warmup - 1
    write_note(self._note)
    return
  end
  if self.warmup == 1 then
    -- Timing starts now; what came before (start-up, the first step) is program time only.
    self.train_start_time, self.prev_time = now, now
    self.train_start_step = step
    self.accum_program_time = self.accum_program_time + (now - self.program_start_time)
    self.paused_time = 0
    self.warmup = 0
    write_note(self._note)
    return
  end

  local dt = now - self.prev_time - self.paused_time
  local ncores = self:_device_count_now()
  self.img_per_sec = self.global_bs * ds / dt  -- for the progress line
  measure("img/sec/core", self.img_per_sec / ncores)

  self.accum_train_time = self.accum_train_time + dt
  self.accum_pause_time = self.accum_pause_time + self.paused_time
  self.accum_program_time = self.accum_program_time + dt + self.paused_time

  local core_hours = self.accum_train_time * ncores / 60 / 60
  measure("core_hours_" .. self._device_kind, core_hours)
  measure("core_hours", core_hours)

  -- The estimates use the average speed since warm-up, pauses included.
  local elapsed = now - self.train_start_time
  local steps_timed = step - self.train_start_step
  local steps_todo = self.total_steps - step
  self.eta = elapsed / steps_timed * steps_todo  -- seconds, for the progress line
  self._note = steps_note(step, self.total_steps)
    .. "\nWalltime:" .. M.hms(self.accum_program_time)
    .. " (" .. M.hms(self.accum_eval_time) .. " eval)"
    .. "\nETA:" .. M.hms(self.eta)
    .. "\nTotal train time:" .. M.hms(elapsed / steps_timed * self.total_steps)
  write_note(self._note)

  self._log_memory(measure)

  self.prev_time = now
  self.paused_time = 0
end

-- Stops the clock for work that is not training (checkpoints, evals). `wait_for` is accepted
-- for big_vision's signature: JAX must wait for asynchronous work there, while libtorch's CPU
-- ops have finished when they return.
function Chrono:pause(wait_for)
  if self.pause_start ~= nil then error("chrono: don't pause twice", 2) end
  self.pause_start = self._clock()
  self._pause_began = self.pause_start
end

-- Restarts the clock; resume("eval") counts the whole pause as eval time too.
function Chrono:resume(what)
  if self.pause_start == nil then error("chrono: resume() without pause()", 2) end
  local now = self._clock()
  self.paused_time = self.paused_time + (now - self.pause_start)
  if what == "eval" then self.accum_eval_time = self.accum_eval_time + (now - self._pause_began) end
  self.pause_start, self._pause_began = nil, nil
end

-- The accumulators as of `now`: what the last tick accumulated plus what came since (this
-- process's time so far while it warms up; after warm-up, the time since the last tick, its
-- pauses, an open one too, as pause time and the rest as train time). Changes nothing.
function Chrono:_totals(now)
  local t = {program = self.accum_program_time, train = self.accum_train_time,
             pause = self.accum_pause_time, eval = self.accum_eval_time}
  if self.warmup > 0 then
    t.program = t.program + (now - self.program_start_time)
  else
    local paused = self.paused_time + (self.pause_start and now - self.pause_start or 0)
    local since = now - self.prev_time
    t.program = t.program + since
    t.pause = t.pause + paused
    t.train = t.train + (since - paused)
  end
  return t
end

-- The accumulators, for the training checkpoint (JSON-able: four floats and an integer), as
-- of now and, with `step` (the checkpoint's), with the examples of the steps since the last
-- tick: a run resumed from it continues where this one is.
function Chrono:state(step)
  local t = self:_totals(self._clock())
  local examples = self.accum_examples_seen
  if step ~= nil and self.prev_step ~= nil and self.global_bs and step > self.prev_step then
    examples = examples + (step - self.prev_step) * self.global_bs
  end
  return {
    accum_program_time = t.program,
    accum_train_time = t.train,
    accum_pause_time = t.pause,
    accum_eval_time = t.eval,
    accum_examples_seen = examples,
  }
end

-- The note at the end of a run (after its final evals), measured now: Walltime is the program
-- time of every process of the run (start-up, steps, evals, checkpoints), "(Ns eval)" the time
-- its evals took, initial and final ones included, and Total train time the time its timed
-- steps took up to the last tick (pauses and each process's warm-up excluded: what core_hours
-- counts), so never more than Walltime. big_vision prints the note of the last tick here,
-- before the final evals and with an estimate for the train time.
function Chrono:summary()
  local t = self:_totals(self._clock())
  local step, total = self.prev_step, self.total_steps
  if step == nil or not total then return self._note end
  local eta = step >= total and 0 or self.eta
  return steps_note(step, total)
    .. "\nWalltime:" .. M.hms(t.program) .. " (" .. M.hms(t.eval) .. " eval)"
    .. (eta and "\nETA:" .. M.hms(eta) or "")
    .. "\nTotal train time:" .. M.hms(self.accum_train_time)
end

-- Restores state() from a checkpoint; missing entries start at 0 (load() resets everything).
function Chrono:load(state)
  state = state or {}
  local function num(key)
    local v = state[key]
    if v == nil then return 0.0 end
    if type(v) ~= "number" then
      error(string.format("chrono.load: %s must be a number, got %s", key, type(v)), 3)
    end
    return v
  end
  self.accum_program_time = num("accum_program_time") + 0.0
  self.accum_train_time = num("accum_train_time") + 0.0
  self.accum_pause_time = num("accum_pause_time") + 0.0
  self.accum_eval_time = num("accum_eval_time") + 0.0  -- not in big_vision's: 0 from its checkpoints
  -- Python's int(): truncation towards zero.
  local ex = num("accum_examples_seen")
  self.accum_examples_seen = math.tointeger(ex >= 0 and math.floor(ex) or math.ceil(ex))
end

local function timed(clock, fn)
  local t0 = clock()
  local results = table.pack(fn())
  return clock() - t0, results
end

-- The clock's reading (seconds), for timings that do not fit in log_timing's function.
function Chrono:now()
  return self._clock()
end

-- Runs fn() and measures its duration as `name` at once (e.g. z/secs/eval/val). Returns fn's
-- results. With opts.noop the time is not measured (big_vision's noop=True). An error in fn
-- propagates and nothing is measured.
function Chrono:log_timing(name, fn, opts)
  local dt, results = timed(self._clock, fn)
  if not (opts and opts.noop) and self._measure then self._measure(name, dt) end
  return table.unpack(results, 1, results.n)
end

-- Runs fn() and keeps its duration; the mean of those kept for `name` is measured at the next
-- tick (for work timed several times per step).
function Chrono:log_timing_avg(name, fn, opts)
  local dt, results = timed(self._clock, fn)
  if not (opts and opts.noop) then
    if not self._timing_history[name] then
      self._timing_history[name] = {}
      self._timing_names[#self._timing_names + 1] = name
    end
    local h = self._timing_history[name]
    h[#h + 1] = dt
  end
  return table.unpack(results, 1, results.n)
end

-- big_vision's utils.steps: the `prefix` duration of `config` (prefix_steps, _examples, _epochs
-- or _percent, at most one of them) in steps. data_size, batch_size and total_steps may be nil
-- where unknown (the duration then must not need them); without `fallback` a missing duration is
-- an error naming the prefix.
--   chrono.steps("total", config, ntrain, batch_size)
--   chrono.steps("log_training", config, ntrain, batch_size, total_steps)
function M.steps(prefix, config, data_size, batch_size, total_steps, fallback)
  return bv._durations.steps(prefix, require("bv.json").encode(config or {}), data_size,
                            batch_size, total_steps or 0, fallback)
end

-- big_vision's utils.itstime: whether `step` is one of every `every` steps out of `total`
-- (opts: first = true, last = true, drop_close_to_last = 0.25). every = nil or 0: never.
function M.itstime(step, every, total, opts)
  return bv._durations.itstime(step, every, total, opts)
end

return M
