-- bv.tfds_splits: TFDS's split language and its arithmetic, as tensorflow_datasets computes it
-- (core/splits.py, core/subsplits_utils.py, core/utils/shard_utils.py, core/reader.py).
--
--   local S = require "bv.tfds_splits"
--   local splits = {{name = "train", shard_lengths = {20, 20}}, {name = "test", ...}}  -- in order
--   S.absolute("train[:50%]+test", splits)   --> {{"train", nil, 20}, {"test", nil, nil}}
--   S.absolute(S.even_splits("train", 3)[2], splits)   -- process 2 of 3 (tfds.even_splits)
--   S.absolute("train[:50%]", splits, {rounding = "pct1_dropremainder"})
--   S.file_instructions(abs, splits)
--     --> {{split =, shard = 1-based, skip =, take = (-1: to the end), length =}...}
--   S.interleave(instructions, lengths)   --> the blocks in the order TFDS reads them
--
-- An absolute instruction is {split, from, to}: from nil is the start, to nil the end (TFDS's
-- None). Errors say which expression and why, as TFDS refuses it.
local round_even = require("bv.chrono").round_even
local suggest = require "bv.suggest"

local M = {}

-- ReadConfig's defaults with shuffle_files=False: interleave(cycle_length=16, block_length=16).
M.CYCLE_LENGTH, M.BLOCK_LENGTH = 16, 16

local function fail(spec, msg)
  error(string.format("tfds: split '%s': %s (see https://www.tensorflow.org/datasets/splits)",
                      bv.snippet(tostring(spec)), msg), 0)
end

local function unrecognized(spec, whole)
  fail(whole, string.format("unrecognized split format '%s'", bv.snippet(spec)))
end

-- Python's int(s) / float(s) for the digits TFDS's slice pattern lets through (-?[\d_.]+):
-- underscores only between digits.
local function py_number(s, as_float)
  local sign, body = s:match("^(%-?)(.*)$")
  if body:find("__", 1, true) or body:find("^_") or body:find("_$")
      or body:find("_%.") or body:find("%._") then
    return nil
  end
  body = body:gsub("_", "")
  if as_float then
    if not (body:match("^%d+%.?%d*$") or body:match("^%.%d+$")) then return nil end
    return tonumber(sign .. body) + 0.0
  end
  if not body:match("^%d+$") then return nil end
  return math.tointeger(tonumber(sign .. body))
end

-- One slice boundary: "" (none) or -?[\d_.]+ followed by "%" or "shard". Returns matched,
-- value string (or nil), unit (or nil).
local function parse_boundary(s)
  if s == "" then return true, nil, nil end
  local val, unit = s:match("^(%-?[%d_.]+)(.*)$")
  if not val or (unit ~= "" and unit ~= "%" and unit ~= "shard") then return false end
  return true, val, unit ~= "" and unit or nil
end

-- "train[10:20%]" -> {split =, from =, to =, unit = "abs"|"%"|"shard", rounding = "closest"},
-- or {all = true} for "all".
local function parse_one(spec, whole)
  local name, rest = spec:match("^([%w_%-]+)(.*)$")
  local selector = rest and (rest == "" and "" or rest:match("^%[([%w_%%:.%-]+)%]$"))
  if not name or not selector then
    unrecognized(spec, whole)
  end
  if name == "all" then
    if rest ~= "" then fail(whole, "'all' does not support slices") end
    return {all = true}
  end
  local from, to, unit
  if rest == "" then
    unit = "abs"
  else
    local parts = {}
    for part in (selector .. ":"):gmatch("([^:]*):") do parts[#parts + 1] = part end
    local ms = {}
    local any = false
    for i, p in ipairs(parts) do
      local ok, val, u = parse_boundary(p)
      if not ok then unrecognized(spec, whole) end
      ms[i] = {val = val, unit = u}
      if p ~= "" then any = true end
    end
    if not any then unrecognized(spec, whole) end
    if #parts == 1 then
      if ms[1].unit ~= "shard" then
        fail(whole, string.format("'%s': a single index needs shards (train[1shard]); absolute "
          .. "and percent boundaries only support slices (train[1:2], train[:10%%])", spec))
      end
      from = ms[1].val
      local f = py_number(from)
      if not f then fail(whole, string.format("'%s' is not a whole number", from)) end
      to, unit = tostring(f + 1), "shard"
    elseif #parts == 2 then
      from, to = ms[1].val, ms[2].val
      unit = ms[1].unit or ms[2].unit or "abs"
    else
      unrecognized(spec, whole)
    end
  end
  local function num(s)
    if s == nil then return nil end
    local v = py_number(s, unit == "%")
    if v == nil then
      fail(whole, string.format("'%s' is not a %s", s, unit == "%" and "number" or "whole number"))
    end
    return v
  end
  local r = {split = name, from = num(from), to = num(to), unit = unit, rounding = "closest"}
  if unit == "%" and (math.abs(r.from or 0) > 100 or math.abs(r.to or 0) > 100) then
    fail(whole, "percent slice boundaries must be in [-100, 100]")
  end
  return r
end

-- The relative instructions of a split string ("train[:10%]+test"), in order.
function M.parse(spec)
  if type(spec) ~= "string" then
    error("tfds: a split must be a string such as \"train[:99%]\", got " .. type(spec), 0)
  end
  local out, pos = {}, 1
  while true do
    local s, e = spec:find("%s*%+%s*", pos)
    out[#out + 1] = parse_one(spec:sub(pos, s and s - 1 or #spec), spec)
    if not s then break end
    pos = e + 1
  end
  return out
end

-- tfds.even_splits(split, n, drop_remainder=): n disjoint parts, split arithmetic deferred
-- (M.absolute computes them). Without drop_remainder the first parts get one example more.
function M.even_splits(split, n, drop_remainder)
  if math.type(n) ~= "integer" or n < 1 then
    error("tfds.even_splits: n must be a positive integer, got " .. tostring(n), 2)
  end
  local out = {}
  for i = 0, n - 1 do
    out[i + 1] = {even = true, split = split, index = i, count = n,
                  drop_remainder = drop_remainder and true or false}
  end
  return out
end

local function describe(arg)
  if type(arg) == "table" and arg.even then
    return string.format("%s (part %d of %d)", describe(arg.split), arg.index + 1, arg.count)
  end
  return tostring(arg)
end
M.describe = describe

local function info_of(splits, name, whole)
  for _, s in ipairs(splits) do
    if s.name == name then return s end
  end
  local names = {}
  for _, s in ipairs(splits) do names[#names + 1] = s.name end
  fail(whole, string.format("unknown split '%s'%s; the dataset has: %s", bv.snippet(name),
                            suggest.did_you_mean(name, names), table.concat(names, ", ")))
end

local function num_examples(info)
  local n = 0
  for _, l in ipairs(info.shard_lengths) do n = n + l end
  return n
end
M.num_examples = num_examples

-- sum(shard_lengths[:k]) with Python's slice rules (k < 0 counts from the end).
local function prefix_sum(lengths, k)
  if k < 0 then k = math.max(0, #lengths + k) end
  local n = 0
  for i = 1, math.min(k, #lengths) do n = n + lengths[i] end
  return n
end

local function plain(v)  -- 12.0 -> 12; 12.5 stays
  if v == nil then return nil end
  return math.tointeger(v) or v
end

-- One relative instruction to an absolute one (TFDS's _rel_to_abs_instr).
local function rel_to_abs(r, splits, whole)
  local info = info_of(splits, r.split, whole)
  local n = num_examples(info)
  local from, to = r.from, r.to
  if r.unit == "%" then
    local function pct(b)
      if r.rounding == "closest" then return round_even(b * n / 100.0) end
      if n < 100 then
        fail(whole, string.format("pct1_dropremainder rounding on split '%s' of %d examples "
          .. "(fewer than 100) always selects nothing", r.split, n))
      end
      return b * math.floor(n / 100.0)
    end
    from = from == nil and 0 or pct(from)
    to = to == nil and n or pct(to)
  elseif r.unit == "shard" then
    from = from == nil and 0 or prefix_sum(info.shard_lengths, from)
    if to ~= nil and to <= 0 then to = #info.shard_lengths + to end
    to = to == nil and n or prefix_sum(info.shard_lengths, to)
  else
    from, to = from or 0, to == nil and n or to
  end
  if math.abs(from) > n or math.abs(to) > n then
    fail(whole, string.format("the slice [%s:%s] does not fit split '%s' of %d examples",
                              from == 0 and "" or tostring(plain(from)),
                              to == 0 and "" or tostring(plain(to)), r.split, n))
  end
  if from < 0 then from = n + from elseif from == 0 then from = nil end
  if to < 0 then to = n + to elseif to == n then to = nil end
  return {r.split, plain(from), plain(to)}
end

-- The absolute instructions of `arg` (a split string or an M.even_splits part) over `splits`
-- ({{name =, shard_lengths =}...} in the dataset's order). opts.rounding: "closest" (TFDS's
-- default, the only one a split string can ask for) or "pct1_dropremainder" (percents are
-- multiples of 1% of the split: tfds.core.ReadInstruction(..., rounding=)).
function M.absolute(arg, splits, opts)
  local rounding = opts and opts.rounding or "closest"
  if rounding ~= "closest" and rounding ~= "pct1_dropremainder" then
    error("tfds: rounding must be closest or pct1_dropremainder, got " .. tostring(rounding), 0)
  end
  if type(arg) == "table" and arg.even then
    local out = {}
    for _, a in ipairs(M.absolute(arg.split, splits, opts)) do
      local info = info_of(splits, a[1], describe(arg))
      local start, stop = a[2] or 0, a[3] == nil and num_examples(info) or a[3]
      if stop < start then
        fail(describe(arg), string.format("the slice of '%s' ends (%s) before it starts (%s), "
          .. "so it cannot be split evenly", a[1], tostring(stop), tostring(start)))
      end
      local n = stop - start
      local per = n // arg.count
      local from = start + per * arg.index
      local to = start + per * (arg.index + 1)
      local left = n % arg.count
      if left > 0 and not arg.drop_remainder then
        from = from + math.min(arg.index, left)
        to = to + math.min(arg.index + 1, left)
      end
      out[#out + 1] = rel_to_abs({split = a[1], from = from, to = to, unit = "abs"}, splits,
                                 describe(arg))
    end
    return out
  end
  local out = {}
  for _, r in ipairs(M.parse(arg)) do
    if r.all then
      for _, s in ipairs(splits) do
        out[#out + 1] = rel_to_abs({split = s.name, unit = "abs"}, splits, arg)
      end
    else
      r.rounding = rounding
      out[#out + 1] = rel_to_abs(r, splits, arg)
    end
  end
  return out
end

-- The examples the absolute instructions select (from the shard lengths).
function M.count(abs, splits)
  local n = 0
  for _, a in ipairs(abs) do
    local total = num_examples(info_of(splits, a[1], a[1]))
    n = n + math.max(0, (a[3] == nil and total or a[3]) - (a[2] or 0))
  end
  return n
end

-- Shard reads for the absolute instructions (TFDS's get_file_instructions, split after split):
-- {{split =, shard = 1-based index, skip =, take = (-1: to the shard's end), length =}...}.
-- Empty shards are left out.
function M.file_instructions(abs, splits)
  local out = {}
  for _, a in ipairs(abs) do
    local info = info_of(splits, a[1], a[1])
    local n = num_examples(info)
    local from, to = a[2] or 0, a[3] == nil and n or a[3]
    if math.type(from) ~= "integer" or math.type(to) ~= "integer" then
      error(string.format("tfds: split '%s' [%s:%s] is not a whole number of examples",
                          a[1], tostring(a[2]), tostring(a[3])), 0)
    end
    local first, last = 0, 0
    for i, length in ipairs(info.shard_lengths) do
      if length > 0 then
        last = last + length
        if from < last and to > first then
          local skip = from > first and from - first or 0
          local take = to < last and to - first - skip or -1
          if take ~= 0 then
            out[#out + 1] = {split = a[1], shard = i, skip = skip, take = take, length = length}
          end
        end
        first = first + length
      end
    end
  end
  return out
end

-- The order TFDS reads file instructions in (tf.data's interleave: `cycle` files open at once,
-- `block` records from each in turn; a file that ends frees its place for the next file).
-- `instructions`: {{skip =, take =, length =}...}. Returns blocks {{i = instruction index,
-- skip =, take =}...}, each a run of records of one instruction, contiguous runs merged; take
-- is -1 for a block that reads its instruction's shard to the end.
function M.interleave(instructions, cycle, block)
  cycle, block = cycle or M.CYCLE_LENGTH, block or M.BLOCK_LENGTH
  local slots, next_input, open = {}, 1, 0
  local out = {}
  local function emit(i, skip, take, to_end)
    local last = out[#out]
    if last and last.i == i and last.take ~= -1 and last.skip + last.take == skip then
      last.take = to_end and -1 or last.take + take
    else
      out[#out + 1] = {i = i, skip = skip, take = to_end and -1 or take}
    end
  end
  local c = 1
  while next_input <= #instructions or open > 0 do
    local s = slots[c]
    if s then
      local n = math.min(block, s.left)
      if n > 0 then emit(s.i, s.pos, n, s.to_end and n == s.left) end
      s.pos, s.left = s.pos + n, s.left - n
      if s.left == 0 and n < block then  -- ended inside its turn: the place frees now
        slots[c], open = nil, open - 1
      end
      c = c % cycle + 1
    elseif next_input <= #instructions then
      local f = instructions[next_input]
      local left = f.take == -1 and f.length - f.skip or f.take
      slots[c] = {i = next_input, pos = f.skip, left = left, to_end = f.take == -1}
      next_input, open = next_input + 1, open + 1
    else
      c = c % cycle + 1
    end
  end
  return out
end

return M
