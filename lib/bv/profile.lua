-- bv.profile: libtorch's profiler (bv.profiler) over training steps or any function, and the
-- table of the slowest ops it prints. `bvlua train ... --profile START:STOP` records steps
-- START..STOP (bv.trainers.utils); at the prompt:
--
--   local profile = require "bv.profile"
--   print(profile.call(function() model:loss_and_grads(params, batch) end, "/tmp/step.json"))
--
-- The trace opens in https://ui.perfetto.dev or chrome://tracing: one row per thread, the ops
-- nested as they called each other, "ProfilerStep#N" around each training step and, inside
-- it, a named range around each evaluation ("eval/NAME") and checkpoint ("checkpoint") of the
-- step: profile.range marks them.
local M = {}

-- "START:STOP" -> {start = START, stop = STOP}, whole numbers with 1 <= START <= STOP; else nil
-- and a message naming the flag.
function M.parse_window(text)
  local a, b = tostring(text):match("^%s*(%d+)%s*:%s*(%d+)%s*$")
  local start, stop = math.tointeger(tonumber(a or "")), math.tointeger(tonumber(b or ""))
  if not start or not stop then
    return nil, string.format("--profile wants START:STOP, the first and the last step to "
                              .. "record (e.g. 5:8), got '%s'", tostring(text))
  end
  if start < 1 or stop < start then
    return nil, string.format("--profile %s: wants 1 <= START <= STOP", text)
  end
  return {start = start, stop = stop}
end

-- Runs fn(...) inside a range named `name` (e.g. "eval/acc") of the recording under way, and
-- returns what fn returns; without a recording, just runs it. The trainers mark their
-- evaluations and checkpoints so. A failing fn leaves its range open: the next step's mark, or
-- the end of the recording, ends it.
function M.range(name, fn, ...)
  if not bv.profiler.running() then return fn(...) end
  bv.profiler.push_range(name)
  local results = table.pack(fn(...))
  bv.profiler.pop_range()
  return table.unpack(results, 1, results.n)
end

-- Where the recorded time went: the steps without the named ranges ("training steps"), then
-- each range (count, total, mean), each with its share of the steps' time (of the whole
-- recording when no steps were marked). The ranges are taken to lie in the steps, not in each
-- other, as the trainers' do.
local function breakdown(r, whole, add)
  local names, ranges_s, width = {}, 0, #"training steps"
  for _, range in ipairs(r.ranges or {}) do
    names[#names + 1], ranges_s = range.name, ranges_s + range.total_s
    width = math.max(width, #range.name)
  end
  if r.steps == 0 and #names == 0 then return {} end
  local fmt = "%-" .. width .. "s %6s %10s %10s %6s"
  add(fmt, "", "count", "total s", "mean s", "share")
  local function row(name, count, total_s)
    add(fmt, name, count, string.format("%.3f", total_s),
        string.format("%.3f", total_s / math.max(count, 1)),
        string.format("%.1f%%", 100 * total_s / whole))
  end
  if r.steps > 0 then row("training steps", r.steps, math.max(0, r.steps_s - ranges_s)) end
  for _, range in ipairs(r.ranges or {}) do row(range.name, range.calls, range.total_s) end
  return names
end

-- The summary bv.profiler.stop returned, as a table: where the time went (breakdown), then
-- the `top` (default 15) ops with the largest self time (an op's own time, without the ops it
-- called), host ops and GPU kernels apart. Percentages are of the recorded steps' time (or of
-- the whole recording, when no steps were marked).
function M.table(r, opts)
  opts = opts or {}
  local top = opts.top or 15
  local whole = math.max(r.steps > 0 and r.steps_s or r.wall_s, 1e-12)
  local lines = {}
  local function add(...) lines[#lines + 1] = string.format(...) end
  local function row(self_s, total, calls, name)
    add("%10.1f %6.1f%% %10s %8s  %s", self_s * 1e3, 100 * self_s / whole, total, calls, name)
  end
  local function section(title, device)
    local shown, rest, rest_n = 0, 0, 0
    add("%s", title)
    add("%10s %7s %10s %8s  %s", "self ms", "self %", "total ms", "calls", "op")
    for _, op in ipairs(r.ops) do
      if op.device == device then
        if shown < top then
          shown = shown + 1
          row(op.self_s, string.format("%.1f", op.total_s * 1e3), op.calls, op.name)
        else
          rest, rest_n = rest + op.self_s, rest_n + 1
        end
      end
    end
    if rest_n > 0 then row(rest, "", "", string.format("(%d other ops)", rest_n)) end
  end
  add("%s (%s)", opts.title or "Profile", r.steps > 0
      and string.format("%d step(s), %.3f s", r.steps, r.steps_s)
      or string.format("%.3f s", r.wall_s))
  local names = breakdown(r, whole, add)
  local together = r.steps > 0 and " (training steps and the ranges above together)"
      or " (in the ranges above and out of them)"
  section("host ops, by self time" .. (#names > 0 and together or "") .. ":", false)
  if r.steps > 0 then
    row(r.outside_ops_s, "", "", "(in the steps but in no op: Lua, waiting for data, logging)")
  end
  if #names > 0 then
    local self_s = 0
    for _, range in ipairs(r.ranges) do self_s = self_s + range.self_s end
    row(self_s, "", "", string.format("(in %s but in no op)", table.concat(names, ", ")))
  end
  local has_device = false
  for _, op in ipairs(r.ops) do has_device = has_device or op.device end
  if has_device then section("GPU kernels and copies, by time:", true) end
  if opts.trace then
    add("trace: %s (open it in https://ui.perfetto.dev or chrome://tracing)", opts.trace)
  end
  return table.concat(lines, "\n")
end

-- Runs fn() under the profiler, writes the trace to `trace_path` and returns the table (and
-- the summary). The recording stops also when fn fails; the error is raised again.
function M.call(fn, trace_path, opts)
  assert(type(fn) == "function", "profile.call: wants a function")
  assert(type(trace_path) == "string", "profile.call: wants the trace's path")
  bv.profiler.start(opts)
  local ok, err = pcall(fn)
  local r = bv.profiler.stop(trace_path)
  if not ok then error(err, 0) end
  return M.table(r, {trace = trace_path}), r
end

return M
