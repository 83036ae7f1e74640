-- bv.suggest: edit distances and the "did you mean" of typos, and no suggestion for names
-- that are far from every candidate.
local T = require "tests.lua.lib.testing"
local suggest = require "bv.suggest"

T.test("distance", function()
  T.eq(suggest.distance("", ""), 0)
  T.eq(suggest.distance("abc", ""), 3)
  T.eq(suggest.distance("kitten", "sitting"), 3)
  T.eq(suggest.distance("naïve", "naive"), 1, "code points, not bytes")
end)

T.test("closest", function()
  local keys = {"schedule", "total_epochs", "total_steps", "lr_mults", "wd"}
  T.eq(suggest.closest("shedule", keys), "schedule")
  T.eq(suggest.closest("total_epoch", keys), "total_epochs")
  T.eq(suggest.closest("lr_mult", keys), "lr_mults")
  T.eq(suggest.closest("momentum", keys), nil, "nothing near")
  T.eq(suggest.closest("wd", keys), nil, "an exact name is not a suggestion")
  T.eq(suggest.closest("w", keys), "wd", "one edit for a short name")
  T.eq(suggest.did_you_mean("shedule", keys), " (did you mean 'schedule'?)")
  T.eq(suggest.did_you_mean("zzz", keys), "")
end)

T.test("a name that is not valid UTF-8 is compared byte by byte (found by the config fuzzer)", function()
  T.eq(suggest.distance("\xaa", "ab"), 2)
  T.eq(suggest.closest("\xaas", {"res", "as"}), "as")
  T.eq(suggest.did_you_mean("wd\xff", {"wd", "lr"}), " (did you mean 'wd'?)")
end)

T.run()
