-- bv.suggest: "did you mean ...?" for names a user typed (evaluator types, config keys, ops).
--
--   suggest.closest("classfication", {"classification", "mean"})   --> "classification"
--   suggest.did_you_mean("shedule", keys)   --> " (did you mean 'schedule'?)" or ""
local M = {}

-- The code points of a UTF-8 string; its bytes when it is not valid UTF-8 (a stray byte in a
-- typed name must not turn "did you mean" into an error of its own).
local function chars(s)
  local out = {}
  if utf8.len(s) then
    for _, c in utf8.codes(s) do out[#out + 1] = c end
  else
    for i = 1, #s do out[i] = s:byte(i) end
  end
  return out
end

-- Levenshtein distance over UTF-8 code points (bytes for invalid UTF-8).
function M.distance(a, b)
  local ca, cb = chars(a), chars(b)
  local prev = {}
  for j = 0, #cb do prev[j] = j end
  for i = 1, #ca do
    local cur = {[0] = i}
    for j = 1, #cb do
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca[i] == cb[j] and 0 or 1))
    end
    prev = cur
  end
  return prev[#cb]
end

-- The candidate nearest to `name`, when near enough to be a typo: at most a third of the
-- name's length away (at least 1, at most 3 edits). nil otherwise.
-- A candidate whose length differs by more than that is not compared (the distance is at least
-- the difference), so a name of a megabyte costs no more than reading it.
function M.closest(name, candidates)
  local n = #chars(name)
  local best, best_d = nil, math.min(3, math.max(1, n // 3))
  for _, c in ipairs(candidates) do
    if math.abs(#chars(c) - n) <= best_d then
      local d = M.distance(name, c)
      if d <= best_d and c ~= name and (not best or d < best_d) then best, best_d = c, d end
    end
  end
  return best
end

function M.did_you_mean(name, candidates)
  local c = M.closest(name, candidates)
  return c and string.format(" (did you mean '%s'?)", c) or ""
end

return M
