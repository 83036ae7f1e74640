-- bv.profile: libtorch's profiler (bv.profiler) over training steps or any function, and the
-- table of the slowest ops it prints. `bvlua train ... --profile START:STOP` records steps
-- START..STOP (bv.trainers.utils); at the prompt:
--
--   local profile = require "bv.profile"
--   print(profile.call(function() model:loss_and_grads(params, batch) end, "/tmp/step.json"))
--
-- The trace opens in https://ui.perfetto.dev or chrome://tracing: one row per thread, the ops
-- nested as they called each other, "ProfilerStep#N" around each training step.
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

local function ms(s) return string.format("%10.1f", s * 1e3) end

-- The summary bv.profiler.stop returned, as a table of the `top` (default 15) ops with the
-- largest self time (an op's own time, without the ops it called), host ops and GPU kernels
-- apart. Percentages are of the recorded steps' time (or of the whole recording, when no
-- steps were marked).
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
  local what = r.steps > 0 and string.format("%d step(s), %.3f s, %.3f s per step", r.steps,
                                             r.steps_s, r.steps_s / r.steps)
      or string.format("%.3f s", r.wall_s)
  add("%s (%s)", opts.title or "Profile", what)
  section("host ops, by self time:", false)
  if r.steps > 0 then
    row(r.outside_ops_s, "", "", "(in the steps but in no op: Lua, waiting for data, logging)")
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
