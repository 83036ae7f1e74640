-- bv.progress: what a person watching a training run sees on stdout.
--
--   local p = require("bv.progress").new({total_steps = 400})
--   p:step(120, {loss = 0.51, img_per_sec = 85.2, eta = 80})
--   p:print("[120] eval/val/prec@1 = 0.71")
--   p:interrupt(function() io.stderr:write("WARNING: ...\n") end)
--   p:finish()
--
-- On a terminal the step line is rewritten in place (carriage return, then clear to the end of
-- the line), and other lines are printed above it. When stdout is a file or a pipe (a log, CI),
-- every step() is one plain line, so a log has one line per log step and no control characters.
local chrono = require "bv.chrono"

local M = {}

-- Whether stdout is a terminal. `test -t 1` runs in a child that shares our stdout (os.execute
-- goes through system(), unlike io.popen which gives the child a pipe).
local stdout_tty
function M.stdout_is_tty()
  if stdout_tty == nil then stdout_tty = os.execute("test -t 1") == true end
  return stdout_tty
end

local Progress = {}
Progress.__index = Progress

-- opts.total_steps; opts.tty (default: whether stdout is a terminal); opts.write(text) replaces
-- writing to stdout (tests).
function M.new(opts)
  opts = opts or {}
  local self = setmetatable({}, Progress)
  self.total_steps = opts.total_steps
  self.tty = opts.tty
  if self.tty == nil then self.tty = M.stdout_is_tty() end
  self._write = opts.write or function(text)
    io.stdout:write(text)
    io.stdout:flush()
  end
  self._line = nil  -- the step line on screen (terminal only)
  return self
end

-- "step 120/400 [30.0%] | loss 0.5123 | 85.2 img/s | ETA 1m20s"; fields not known yet are left
-- out (throughput and ETA appear once the chrono's warm-up is over).
function Progress:format(step, info)
  info = info or {}
  local parts = {}
  if self.total_steps and self.total_steps > 0 then
    parts[1] = string.format("step %d/%d [%.1f%%]", step, self.total_steps,
                             step / self.total_steps * 100)
  else
    parts[1] = string.format("step %d", step)
  end
  if info.loss then parts[#parts + 1] = string.format("loss %.4f", info.loss) end
  if info.img_per_sec then parts[#parts + 1] = string.format("%.1f img/s", info.img_per_sec) end
  if info.eta then parts[#parts + 1] = "ETA " .. chrono.hms(info.eta) end
  return table.concat(parts, " | ")
end

function Progress:step(step, info)
  local line = self:format(step, info)
  if self.tty then
    self._write("\r\27[K" .. line)
    self._line = line
  else
    self._write(line .. "\n")
  end
end

-- A line of its own (a note, an eval result). On a terminal it goes above the step line, which
-- is drawn again below it.
function Progress:print(text)
  if self.tty and self._line then
    self._write("\r\27[K" .. text .. "\n" .. self._line)
  else
    self._write(text .. "\n")
  end
end

-- Lets write() put text elsewhere on the terminal (stderr) without breaking the step line: the
-- line is cleared first and drawn again after. Off a terminal, write() just runs.
function Progress:interrupt(write)
  if not (self.tty and self._line) then return write() end
  self._write("\r\27[K")
  write()
  self._write(self._line)
end

-- Ends the step line (the terminal's cursor moves to a fresh line).
function Progress:finish()
  if self.tty and self._line then self._write("\n") end
  self._line = nil
end

return M
