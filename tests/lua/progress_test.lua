-- bv.progress: the step line on a terminal (rewritten in place) and in a log (a line per step).
local T = require "tests.lua.lib.testing"
local progress = require "bv.progress"

local function recorder()
  local out = {}
  return out, function(text) out[#out + 1] = text end
end

T.test("format: step, percent, loss, throughput, ETA; unknown fields left out", function()
  local p = progress.new({total_steps = 400, tty = false, write = function() end})
  T.eq(p:format(120, {loss = 0.51234, img_per_sec = 85.25, eta = 80}),
       "step 120/400 [30.0%] | loss 0.5123 | 85.2 img/s | ETA 1m20s")
  T.eq(p:format(1, {loss = 2}), "step 1/400 [0.2%] | loss 2.0000")
  p.total_steps = nil
  T.eq(p:format(7), "step 7")
end)

T.test("not a terminal: one plain line per step, messages as lines", function()
  local out, write = recorder()
  local p = progress.new({total_steps = 10, tty = false, write = write})
  p:step(5, {loss = 1})
  p:print("[5] eval/val/prec@1 = 0.5")
  p:step(10, {loss = 0.5})
  p:finish()
  T.eq(table.concat(out), "step 5/10 [50.0%] | loss 1.0000\n[5] eval/val/prec@1 = 0.5\n"
                          .. "step 10/10 [100.0%] | loss 0.5000\n")
  T.truthy(not table.concat(out):find("[\r\27]"), "no control characters in a log")
end)

T.test("terminal: the step line is rewritten; messages go above it; finish ends it", function()
  local out, write = recorder()
  local p = progress.new({total_steps = 10, tty = true, write = write})
  p:print("NOTE: before any step")
  p:step(1, {loss = 1})
  p:step(2, {loss = 0.9})
  p:print("NOTE: hello")
  p:finish()
  T.eq(out, {"NOTE: before any step\n",
             "\r\27[Kstep 1/10 [10.0%] | loss 1.0000",
             "\r\27[Kstep 2/10 [20.0%] | loss 0.9000",
             "\r\27[KNOTE: hello\nstep 2/10 [20.0%] | loss 0.9000",
             "\n"})
end)

T.test("interrupt: a terminal's step line is cleared and drawn again; else it just runs", function()
  local out, write = recorder()
  local p = progress.new({total_steps = 10, tty = true, write = write})
  p:interrupt(function() out[#out + 1] = "<before any step>" end)
  p:step(3, {loss = 1})
  p:interrupt(function() out[#out + 1] = "<stderr>" end)
  T.eq(out, {"<before any step>", "\r\27[Kstep 3/10 [30.0%] | loss 1.0000", "\r\27[K", "<stderr>",
             "step 3/10 [30.0%] | loss 1.0000"})
  local log_out, log_write = recorder()
  local q = progress.new({total_steps = 10, tty = false, write = log_write})
  q:step(3, {loss = 1})
  q:interrupt(function() log_out[#log_out + 1] = "<stderr>" end)
  T.eq(log_out, {"step 3/10 [30.0%] | loss 1.0000\n", "<stderr>"})
end)

T.run()
