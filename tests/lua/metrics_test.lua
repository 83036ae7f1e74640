-- bv.metrics: big_vision's metrics file (one JSON line per step, keys in measurement order,
-- Python's json.dumps spelling, NaN/Infinity), the log lines, and reading files back.
local T = require "tests.lua.lib.testing"
local metrics = require "bv.metrics"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local function fresh_dir(name)
  local d = tmp .. "/" .. name
  bv.fs.mkdirs(d)
  return d
end

local function lines_of(path)
  local out = {}
  for line in bv.fs.read_file(path):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

local function capture()
  local logged = {}
  return logged, function(line) logged[#logged + 1] = line end
end

T.test("one line per step, keys in measurement order, Python's spelling", function()
  local dir = fresh_dir("order")
  local logged, print_fn = capture()
  local mw = metrics.writer(dir, {print = print_fn, color = false})
  mw:step_start(1)
  mw:measure("z/last_alphabetically", 0.25)
  mw:measure("b", 3)                          -- integers become floats
  mw:measure("a", true)                       -- booleans too
  mw:measure("t0", bv.tensor(1.5))            -- 0-d tensor
  mw:measure("t11", bv.tensor({{2}}))         -- [1, 1] squeezes to a scalar
  mw:measure("shape", bv.zeros({2, 3}))       -- non-scalars are logged as their shape
  mw:measure("squeezed", bv.zeros({2, 1}))    -- after squeezing: (2,)
  mw:measure("small", 1e-5)
  mw:measure("b", 4)                          -- a repeat keeps its place, takes the new value
  mw:step_end()
  mw:step_start(2)
  mw:step_end()                               -- nothing measured: no line
  mw:step_start(3)
  mw:measure("caf\u{e9}", 0.1)                -- non-ASCII is escaped like ensure_ascii
  mw:step_end()
  mw:close()
  T.eq(lines_of(dir .. "/big_vision_metrics.txt"), {
    '{"step": 1, "z/last_alphabetically": 0.25, "b": 4.0, "a": 1.0, "t0": 1.5, "t11": 2.0, '
      .. '"shape": [2, 3], "squeezed": [2], "small": 1e-05}',
    '{"step": 3, "caf\\u00e9": 0.1}',
  })
  T.eq(logged, {"[1] z/last_alphabetically = 0.25", "[1] b = 3.0", "[1] a = 1.0", "[1] t0 = 1.5",
                "[1] t11 = 2.0", "[1] shape = (2, 3)", "[1] squeezed = (2,)", "[1] small = 1e-05",
                "[1] b = 4.0", "[3] caf\u{e9} = 0.1"})
end)

T.test("non-finite values are written as NaN/Infinity and read back", function()
  local dir = fresh_dir("nan")
  local logged, print_fn = capture()
  local mw = metrics.writer(dir, {print = print_fn, color = false})
  mw:step_start(7)
  mw:measure("loss", 0 / 0)
  mw:measure("up", math.huge)
  mw:measure("down", bv.tensor(-math.huge))
  mw:step_end()
  mw:close()
  local path = dir .. "/big_vision_metrics.txt"
  T.eq(lines_of(path), {'{"step": 7, "loss": NaN, "up": Infinity, "down": -Infinity}'})
  T.eq(logged, {"[7] loss = nan", "[7] up = inf", "[7] down = -inf"})
  local rows = metrics.read(path)
  T.eq(#rows, 1)
  T.eq(rows[1].step, 7)
  T.truthy(rows[1].loss ~= rows[1].loss, "loss reads back as NaN")
  T.eq(rows[1].up, math.huge)
  T.eq(rows[1].down, -math.huge)
  -- The words are only special outside strings: a key or string value spelled NaN stays text.
  local r = metrics.decode_line(
    '{"step": 1, "NaN": NaN, "s": "x NaN \\" Infinity", "l": [-Infinity]}')
  T.truthy(r.NaN ~= r.NaN)
  T.eq(r.s, 'x NaN " Infinity')
  T.eq(r.l[1], -math.huge)
end)

T.test("colour escape only when asked (default: when stdout is a terminal)", function()
  local logged, print_fn = capture()
  local mw = metrics.writer(nil, {print = print_fn, color = true})
  mw:step_start(12)
  mw:measure("x", 2)
  T.eq(logged, {"\27[35m[12]\27[0m x = 2.0"})
  -- Under ctest stdout is not a terminal, so the default is the plain format.
  local plain, print2 = capture()
  metrics.writer(nil, {print = print2}):measure("y", 1)
  T.eq(plain, {"[0] y = 1.0"})
end)

T.test("appends to an existing file; close writes pending measurements once", function()
  local dir = fresh_dir("append")
  local path = dir .. "/big_vision_metrics.txt"
  local _, print_fn = capture()
  local mw = metrics.writer(dir, {print = print_fn})
  mw:measure("num_params", 10)   -- before the loop: step 0, dropped by the next step_start
  mw:step_start(1)
  mw:measure("a", 1)
  mw:step_end()
  mw:close()                     -- step 1 was written: not written again
  local mw2 = metrics.writer(dir, {print = print_fn})
  mw2:step_start(2)
  mw2:measure("a", 2)
  mw2:step_end()
  mw2:step_start(3)
  mw2:measure("a", 3)            -- no step_end: close writes it
  mw2:close()
  T.eq(lines_of(path), {'{"step": 1, "a": 1.0}', '{"step": 2, "a": 2.0}', '{"step": 3, "a": 3.0}'})
  -- A run with no steps (total_steps == 0) keeps its step-0 evals through close().
  local dir0 = fresh_dir("zero")
  local mw0 = metrics.writer(dir0, {print = print_fn})
  mw0:step_start(0)
  mw0:measure("val/prec@1", 0.5)
  mw0:close()
  T.eq(lines_of(dir0 .. "/big_vision_metrics.txt"), {'{"step": 0, "val/prec@1": 0.5}'})
end)

T.test("a failed write is an error naming the step and the reason, never a silent gap", function()
  -- /dev/full fails every write with ENOSPC, as a full disk does.
  local dir = fresh_dir("full")
  T.eq(os.execute("ln -s /dev/full '" .. dir .. "/big_vision_metrics.txt'"), true)
  local _, print_fn = capture()
  local mw = metrics.writer(dir, {print = print_fn})
  mw:step_start(7)
  mw:measure("a", 1)
  local msg = T.raises(function() mw:step_end() end,
                       "cannot write step 7's line to " .. dir .. "/big_vision_metrics.txt")
  T.truthy(msg:find("No space left on device", 1, true), msg)
end)

T.test("disabled writers (other processes) log but write nothing", function()
  local dir = fresh_dir("disabled")
  local logged, print_fn = capture()
  local mw = metrics.writer(dir, {enabled = false, print = print_fn, color = false})
  mw:step_start(1)
  T.eq(mw:measure("a", 0.5), 0.5)
  mw:step_end()
  mw:close()
  T.eq(logged, {"[1] a = 0.5"})
  T.eq(bv.fs.exists(dir .. "/big_vision_metrics.txt"), false)
end)

T.test("read and series", function()
  local dir = fresh_dir("series")
  local _, print_fn = capture()
  local mw = metrics.writer(dir, {print = print_fn})
  for step = 1, 5 do
    mw:step_start(step)
    mw:measure("loss", 1 / step)
    if step % 2 == 0 then mw:measure("val/prec@1", step / 10) end
    mw:step_end()
  end
  mw:close()
  local path = dir .. "/big_vision_metrics.txt"
  local rows = metrics.read(path)
  T.eq(#rows, 5)
  T.eq(rows[4], {step = 4, loss = 0.25, ["val/prec@1"] = 0.4})
  local steps, values = metrics.series(path, "val/prec@1")
  T.eq(steps, {2, 4})
  T.eq(values, {0.2, 0.4})
  steps, values = metrics.series(rows, "loss")
  T.eq(steps, {1, 2, 3, 4, 5})
  T.near(values[3], 1 / 3, 0)
  T.eq(select("#", metrics.series(rows, "absent")), 2)
  T.eq((metrics.series(rows, "absent")), {})
end)

T.test("errors name the culprit", function()
  local _, print_fn = capture()
  local mw = metrics.writer(nil, {print = print_fn})
  T.raises(function() mw:measure("name", "text") end, "cannot measure 'name'")
  T.raises(function() mw:measure(3, 1) end, "string name")
  local bad = tmp .. "/bad.txt"
  bv.fs.write_file(bad, '{"step": 1, "a": 1.0}\n{"step": 2, "a": }\n')
  T.raises(function() metrics.read(bad) end, bad .. ":2:")
  T.raises(function() metrics.read(tmp .. "/missing.txt") end, "missing.txt")
end)

T.run()
