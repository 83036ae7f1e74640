-- bvlua's reads of TFDS data (bv.data.source's bv:tfrecord, from bv.tfds's shard lists) against
-- what the real tensorflow-datasets reads: every example of every split expression in
-- tests/data/tfds/expected.json (scripts/make_tfds_fixture.py), and bv.data's training and
-- evaluation iterators over a TFDS split, per process.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local DIR = "tests/data/tfds"
local expected = json.decode(bv.fs.read_file(DIR .. "/expected.json"))

local function data(split, extra)
  local d = {name = "lines_tfds", split = split, data_dir = DIR}
  for k, v in pairs(extra or {}) do d[k] = v end
  return d
end

-- zlib's crc32 (what the fixture records of each image's bytes).
local CRC = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1) ~= 0 and (0xEDB88320 ~ (c >> 1)) or (c >> 1) end
  CRC[i] = c
end
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do c = CRC[(c ~ s:byte(i)) & 0xFF] ~ (c >> 8) end
  return c ~ 0xFFFFFFFF
end

local function scalar(v)
  if bv.is_tensor(v) then return v:totable()[1] end
  if type(v) == "table" then return v[1] end
  return v
end

-- The examples bvlua reads for a data config, as the fixture records them.
local function read_all(d, opts)
  local src = bv.data.source(d, opts)
  local out = {}
  for i = 1, src:size() do
    local ex = src:example(i)
    local img = ex.image
    if type(img) == "table" then img = img[1] end
    out[i] = {id = scalar(ex.id), label = scalar(ex.label), image_len = #img,
              image_crc32 = crc32(img)}
  end
  return out
end

T.test("reads: every example of every split expression, as TFDS reads it", function()
  local n = 0
  for expr, want in pairs(expected.reads) do
    if want.error then
      T.raises(function() read_all(data(expr)) end, "selects no examples")
    else
      T.eq(read_all(data(expr)), want, expr)
      n = n + #want
    end
  end
  for key, want in pairs(expected.even_reads) do
    local expr, world, rank = key:match("^(.*)|(%d+)|(%d+)$")
    local opts = {rank = tonumber(rank), world = tonumber(world)}
    if want.error then
      T.raises(function() read_all(data(expr), opts) end, "selects no examples")
    else
      T.eq(read_all(data(expr), opts), want, key)
      n = n + #want
    end
  end
  T.truthy(n > 400, "examples compared: " .. n)
end)

T.test("bv.data: training and evaluation over a TFDS split, per process", function()
  local input = {data = data("train[:50%]"), pp = "keep('id', 'label')", batch_size = 4}
  local it, total = bv.data.training(input, {workers = 1})
  T.eq(total, 20)
  local seen = {}
  for _ = 1, 5 do
    for _, id in ipairs(it:next().id:totable()) do seen[scalar(id)] = true end
  end
  local want = {}
  for _, e in ipairs(expected.reads["train[:50%]"]) do want[e.id] = true end
  T.eq(seen, want, "one epoch of train[:50%] is its 20 examples")
  -- two processes: each its tfds.even_splits part, the whole split's size for epochs
  for rank = 0, 1 do
    local it2, total2 = bv.data.inference({data = data("train+validation"), pp = "keep('id')",
                                           batch_size = 8}, {workers = 1, rank = rank, world = 2})
    T.eq(total2, 50)
    local ids = {}
    while true do
      local b = it2:next()
      if not b then break end
      for i, real in ipairs(b._mask:totable()) do
        if real then ids[#ids + 1] = scalar(b.id:totable()[i]) end
      end
    end
    local exp = {}
    for _, e in ipairs(expected.even_reads["train+validation|2|" .. rank]) do exp[#exp + 1] = e.id end
    T.eq(ids, exp, "rank " .. rank)
  end
  T.raises(function() bv.data.training({data = data("tran"), batch_size = 4}) end,
           "input.data: tfds: split 'tran'")
  T.raises(function() bv.data.check_path(data("test", {name = "lines"}), "evals.val.data") end,
           "evals.val.data: tfds: no dataset 'lines'")
end)

T.run()
