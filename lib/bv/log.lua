-- bv.log: the lines a run prints for a person. Several processes train together and would each
-- print the same notes, so only rank 0 prints unless asked; a trainer's progress line (bv.progress)
-- stays whole on a terminal, because lines go above it instead of through it.
--
--   local log = require "bv.log"
--   log.note("Running for %d steps", n)        -- stdout: NOTE: Running for 400 steps
--   log.info("[%d] %s = %s", step, name, v)    -- stdout: the line as given
--   log.warn("%s has no labels", split)        -- stderr: WARNING: val has no labels
--   log.error("bvlua train: %s", msg)          -- stderr: the line as given, on every rank
--   log.all_ranks.note("rank %d joined", r)    -- the same functions, printing on every rank
--   log.setup({rank = shard.rank, progress = p})  -- a trainer, once it has both
--
-- Each takes a string.format pattern and its arguments; with no arguments the text is printed
-- as it is (a '%' in a message needs no escaping). Errors print on every rank: an error that
-- one rank alone meets would otherwise be lost. The rank is setup's, else the launcher's
-- (bv.dist.env(), RANK), else 0. Output goes to io.stdout/io.stderr as they are at the call.
local M = {}

local current = {rank = nil, progress = nil}

-- opts.rank: this process's rank (nil: from the environment); opts.progress: the bv.progress
-- whose step line the lines go above (nil: none). Replaces what an earlier setup gave.
function M.setup(opts)
  opts = opts or {}
  current = {rank = opts.rank, progress = opts.progress}
end

function M.rank()
  if current.rank then return current.rank end
  local dist = rawget(_G, "bv") and bv.dist
  return dist and dist.env().rank or 0
end

local function text(fmt, ...)
  if select("#", ...) == 0 then return tostring(fmt) end
  return string.format(fmt, ...)
end

local function to_stdout(line)
  local p = current.progress
  if p then return p:print(line) end
  io.stdout:write(line, "\n")
  io.stdout:flush()
end

-- stderr shares the terminal with the progress line: clear the line, write, draw it again.
local function to_stderr(line)
  local function write()
    io.stderr:write(line, "\n")
    io.stderr:flush()
  end
  local p = current.progress
  if p then p:interrupt(write) else write() end
end

-- The four functions, printing on rank 0 only (every_rank false) or on every rank.
local function logger(every_rank)
  local function mine() return every_rank or M.rank() == 0 end
  return {
    info = function(fmt, ...) if mine() then to_stdout(text(fmt, ...)) end end,
    note = function(fmt, ...) if mine() then to_stdout("NOTE: " .. text(fmt, ...)) end end,
    warn = function(fmt, ...) if mine() then to_stderr("WARNING: " .. text(fmt, ...)) end end,
    error = function(fmt, ...) to_stderr(text(fmt, ...)) end,
  }
end

for name, fn in pairs(logger(false)) do M[name] = fn end
M.all_ranks = logger(true)

return M
