-- bv:tfrecord through bv._data.source and bv.data: TFRecord shards of tf.train.Example written
-- here (a small protobuf and TFRecord writer below), read by the pipeline, an image field
-- decoded by the pp's decode, resumed at a position, and corrupt records named or skipped.
local T = require "tests.lua.lib.testing"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

-- CRC-32C (Castagnoli), bit by bit here: the reader's own table is what is under test.
local function crc32c(s)
  local c = 0xffffffff
  for i = 1, #s do
    c = c ~ s:byte(i)
    for _ = 1, 8 do c = ((c & 1) == 1) and ((c >> 1) ~ 0x82F63B78) or (c >> 1) end
  end
  return c ~ 0xffffffff
end

local function masked(s)
  local c = crc32c(s)
  return ((((c >> 15) | (c << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff
end

local function varint(v)
  local out = {}
  while v >= 0x80 do
    out[#out + 1] = string.char((v & 0x7f) | 0x80)
    v = v >> 7
  end
  out[#out + 1] = string.char(v)
  return table.concat(out)
end

local function len_field(field, bytes) return varint(field << 3 | 2) .. varint(#bytes) .. bytes end

-- features: {key = {bytes = "..."} | {int = n}}, written as a tf.train.Example.
local function example(features)
  local keys = {}
  for k in pairs(features) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return a > b end)  -- not in order: the reader sorts them
  local entries = {}
  for _, k in ipairs(keys) do
    local f = features[k]
    local feature = f.bytes and len_field(1, len_field(1, f.bytes))
                    or len_field(3, len_field(1, varint(f.int)))  -- packed int64s
    entries[#entries + 1] = len_field(1, len_field(1, k) .. len_field(2, feature))
  end
  return len_field(1, table.concat(entries))
end

local function frame(record)
  local len = string.pack("<I8", #record)
  return len .. string.pack("<I4", masked(len)) .. record .. string.pack("<I4", masked(record))
end

local function write_shard(name, records)
  local framed = {}
  for i, r in ipairs(records) do framed[i] = frame(r) end
  bv.fs.write_file(tmp .. "/" .. name, table.concat(framed))
  return tmp .. "/" .. name
end

-- Two shards of 3 examples: a 4x6 PNG whose pixels are all `label`, and the label.
local read = bv.fs.read_file
local shards = {}
for s = 0, 1 do
  local records = {}
  for k = 0, 2 do
    local label = 3 * s + k
    bv.image.write_png(bv.full({4, 6, 3}, label, "uint8"), tmp .. "/img.png")
    records[#records + 1] = example({image = {bytes = read(tmp .. "/img.png")}, label = {int = label}})
  end
  shards[#shards + 1] = write_shard(string.format("d.tfrecord-%05d-of-00002", s), records)
end

local function data_cfg(list)
  local out = {}
  for i, sh in ipairs(list) do out[i] = {file = shards[sh[1]], skip = sh[2], take = sh[3]} end
  return {name = "bv:tfrecord", shards = out}
end

T.test("bv:tfrecord: the records of the shards, in order, as raw examples", function()
  local src = bv._data.source(data_cfg({{2, 1, -1}, {1, 0, 2}}))
  T.eq(src:size(), 4)
  local labels = {}
  for i = 1, 4 do labels[i] = src:example(i).label end
  T.eq(labels, {4, 5, 0, 1})
  T.eq(src:example(1).image:sub(1, 4), "\x89PNG")
  T.truthy(src:origin(4):find("d.tfrecord-00000-of-00002' record 1 (byte ", 1, true), src:origin(4))
end)

T.test("bv:tfrecord: a pipeline decodes the image field with the pp's decode", function()
  local it = bv.data.inference({data = data_cfg({{1, 0, -1}, {2, 0, -1}}), batch_size = 4,
                                pp = "decode|value_range(0, 1, 0, 255)|keep('image', 'label')"},
                               {workers = 2})
  local b = it:next()
  T.eq(b.image:shape(), {4, 4, 6, 3})
  T.eq(b.label:totable(), {0, 1, 2, 3})
  T.near(b.image[{4, 1, 1, 1}]:item(), 3 / 255, 1e-6)  -- the 4th image's pixels are all 3
  local last = it:next()
  T.eq(last.label:totable(), {4, 5, 0, 0})
  T.eq(last._mask:totable(), {true, true, false, false})
  T.eq(it:next(), nil)
end)

T.test("bv:tfrecord: a training run resumes at its position", function()
  local input = {data = data_cfg({{1, 0, -1}, {2, 0, -1}}), batch_size = 2, pp = "decode"}
  local it = bv.data.training(input, {seed = 3, workers = 2})
  local seen = {}
  for i = 1, 5 do seen[i] = it:next().label:totable() end
  local resumed = bv.data.training(input, {seed = 3, workers = 1, position = 6})
  for i = 4, 5 do T.eq(resumed:next().label:totable(), seen[i]) end
end)

T.test("bv:tfrecord: a corrupt record names its file and record, skip_errors counts it", function()
  local bytes = read(shards[1])
  local len = string.unpack("<I8", bytes)
  local rec = 16 + len  -- every record here is as long
  local at = rec + 12 + 40  -- a byte inside record 1's PNG
  local bad = bytes:sub(1, at - 1) .. string.char(bytes:byte(at) ~ 0xff) .. bytes:sub(at + 1)
  local f = write_shard("bad.tfrecord", {})
  bv.fs.write_file(f, bad)
  local cfg = {name = "bv:tfrecord", shards = {{file = f}}}
  T.raises(function() bv.data.inference({data = cfg, batch_size = 3, pp = "decode"}):next() end,
           "bad.tfrecord' record 1 (byte " .. rec .. "): corrupt record")
  local it = bv.data.training({data = cfg, batch_size = 2, pp = "decode", skip_errors = true},
                              {workers = 1})
  for _ = 1, 3 do T.eq(it:next().image:shape(), {2, 4, 6, 3}) end
  T.truthy(it:skipped() >= 1, "skipped " .. it:skipped())
  T.truthy(it:last_skipped_error():find("record 1", 1, true), it:last_skipped_error())
end)

T.test("bv:tfrecord: cache_raw keeps the records in memory after the first read", function()
  local function run(cache_raw)
    local f = write_shard("cached.tfrecord", {})
    bv.fs.write_file(f, read(shards[1]))
    local input = {data = {name = "bv:tfrecord", shards = {{file = f}}}, batch_size = 2,
                   prefetch = 0, cache_raw = cache_raw}
    local it = bv.data.training(input, {workers = 1})
    for _ = 1, 4 do T.eq(#it:next().image, 2) end  -- every record read (the epoch is 3 batches)
    os.remove(f)
    for _ = 1, 10 do T.eq(#it:next().image, 2) end
  end
  run(true)
  T.raises(function() run(false) end, "cached.tfrecord")
end)

T.test("bv:tfrecord: bad source configs name the culprit", function()
  T.raises(function() bv._data.source({name = "bv:tfrecord"}) end,
           "'shards' must be a list of {file = ..., skip = ..., take = ...}")
  T.raises(function() bv._data.source({name = "bv:tfrecord", shards = {}}) end, "'shards' is empty")
  T.raises(function() bv._data.source({name = "bv:tfrecord", shards = {{file = shards[1], tkae = 1}}}) end,
           "shards[1]: unknown key 'tkae'")
  T.raises(function() bv._data.source({name = "bv:tfrecord", shards = {{skip = 1}}}) end,
           "shards[1]: 'file' (a path) is required")
  T.raises(function() bv._data.source({name = "bv:tfrecord", shards = {{file = shards[1], take = 1.5}}}) end,
           "shards[1]: 'take' must be an integer")
  T.raises(function() bv._data.source({name = "bv:tfrecord", shards = {{file = tmp .. "/no"}}}) end,
           "cannot open '" .. tmp .. "/no'")
  T.raises(function() bv._data.source({name = "bv:tfrecord", fname = "x", shards = {}}) end,
           "bv:tfrecord: unknown key 'fname'")
end)

T.run()
