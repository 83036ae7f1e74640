-- bv.log: rank 0 alone prints unless asked (errors excepted), NOTE:/WARNING: prefixes on the
-- text as given or formatted, lines above a terminal's progress line, and io.stdout/io.stderr
-- as they are when a line is printed.
local T = require "tests.lua.lib.testing"
local log = require "bv.log"
local progress = require "bv.progress"

-- Runs fn with io.stdout and io.stderr replaced; returns what each got, and both in order.
local function captured(fn)
  local out, err, both = {}, {}, {}
  local function sink(buf, tag)
    return {write = function(self, ...)
      for _, s in ipairs({...}) do
        buf[#buf + 1] = tostring(s)
        both[#both + 1] = tag .. tostring(s)
      end
      return self
    end, flush = function(self) return self end}
  end
  local real_out, real_err = io.stdout, io.stderr
  io.stdout, io.stderr = sink(out, "out:"), sink(err, "err:")
  local ok, e = pcall(fn)
  io.stdout, io.stderr = real_out, real_err
  log.setup()
  if not ok then error(e, 0) end
  return table.concat(out), table.concat(err), both
end

T.test("rank 0: notes and info on stdout, warnings and errors on stderr", function()
  local out, err = captured(function()
    log.setup({rank = 0})
    log.note("Running for %d steps, that means %f epochs", 30, 5)
    log.info("[%d] %s = %s", 5, "val/prec@1", "0.5")
    log.note("100% of it, as given")  -- no arguments: not a format
    log.warn("%s has no labels", "val")
    log.error("bvlua train: %s", "boom")
  end)
  T.eq(out, "NOTE: Running for 30 steps, that means 5.000000 epochs\n"
            .. "[5] val/prec@1 = 0.5\nNOTE: 100% of it, as given\n")
  T.eq(err, "WARNING: val has no labels\nbvlua train: boom\n")
end)

T.test("other ranks print errors only, unless all_ranks", function()
  local out, err = captured(function()
    log.setup({rank = 1})
    log.note("quiet")
    log.info("quiet")
    log.warn("quiet")
    log.error("rank %d failed", 1)
    log.all_ranks.note("rank %d joined", 1)
    log.all_ranks.warn("rank %d is slow", 1)
  end)
  T.eq(out, "NOTE: rank 1 joined\n")
  T.eq(err, "rank 1 failed\nWARNING: rank 1 is slow\n")
end)

T.test("without setup the rank is the launcher's (none here: 0)", function()
  log.setup()
  T.eq(log.rank(), bv.dist.env().rank)
  T.eq(log.rank(), 0)
  local out = captured(function() log.note("shown") end)
  T.eq(out, "NOTE: shown\n")
end)

T.test("with a progress line on a terminal, lines go above it and it is drawn again", function()
  local _, _, both = captured(function()
    local p = progress.new({total_steps = 10, tty = true,
                            write = function(s) io.stdout:write(s) end})
    log.setup({rank = 0, progress = p})
    p:step(1, {loss = 1})
    log.note("hello")
    log.warn("careful")
  end)
  T.eq(both, {"out:\r\27[Kstep 1/10 [10.0%] | loss 1.0000",
              "out:\r\27[KNOTE: hello\nstep 1/10 [10.0%] | loss 1.0000",
              "out:\r\27[K", "err:WARNING: careful", "err:\n",
              "out:step 1/10 [10.0%] | loss 1.0000"})
end)

T.test("a bad format is an error naming the pattern's problem", function()
  log.setup({rank = 0})
  T.raises(function() log.note("%d steps", "many") end, "bad argument")
  log.setup()
end)

T.run()
