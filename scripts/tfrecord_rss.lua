-- bv:tfrecord's peak memory on a dataset larger than any of its buffers. `write` writes MB
-- megabytes of TFRecord shards (records of a 100 KB bytes feature and a label) into DIR; `read`,
-- in a fresh process, reads them all through bv.data.inference and prints its peak RSS
-- (getrusage's ru_maxrss) before and after. The reader keeps 16 bytes a record and reads each
-- record when a worker processes it, so the peak follows the batches in flight, not the data:
-- about +60 MB with the defaults below whether 200 or 400 MB are read (2 cores; the batches in
-- flight hold about 26 MB), where jemalloc's default lg_extent_max_active_fit made it +370 and
-- +720 MB (bindings/malloc_conf.cpp says why). tests/cli/tfrecord_memory_test.sh runs it.
--   build/bvlua run scripts/tfrecord_rss.lua write [MB=200] [DIR=/tmp/bv_tfrecord_rss]
--   build/bvlua run scripts/tfrecord_rss.lua read [DIR] [BATCH=64] [WORKERS=4]
local mode = arg and arg[1]
if mode ~= "write" and mode ~= "read" then error("usage: tfrecord_rss.lua write|read ...", 0) end
local mb = mode == "write" and tonumber(arg[2]) or 200
local dir = arg[mode == "write" and 3 or 2] or "/tmp/bv_tfrecord_rss"
local batch_size = mode == "read" and tonumber(arg[3]) or 64
local workers = mode == "read" and tonumber(arg[4]) or 4

-- CRC-32C bit by bit: run once per distinct record (every record here is the same bytes).
local function masked_crc32c(s)
  local c = 0xffffffff
  for i = 1, #s do
    c = c ~ s:byte(i)
    for _ = 1, 8 do c = ((c & 1) == 1) and ((c >> 1) ~ 0x82F63B78) or (c >> 1) end
  end
  c = c ~ 0xffffffff
  return ((((c >> 15) | (c << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff
end

local function varint(v)
  local out = ""
  while v >= 0x80 do
    out = out .. string.char((v & 0x7f) | 0x80)
    v = v >> 7
  end
  return out .. string.char(v)
end

local function len_field(field, bytes) return varint(field << 3 | 2) .. varint(#bytes) .. bytes end

local function frame(record)
  local len = string.pack("<I8", #record)
  return len .. string.pack("<I4", masked_crc32c(len)) .. record
         .. string.pack("<I4", masked_crc32c(record))
end

if mode == "write" then
local payload = {}
local rng = bv.rng(0)
for i = 1, 100 * 1024 do payload[i] = string.char(rng:integer(0, 255)) end
local features = len_field(1, len_field(1, "image") .. len_field(2, len_field(1, len_field(1,
                 table.concat(payload)))))
  .. len_field(1, len_field(1, "label") .. len_field(2, len_field(3, len_field(1, varint(7)))))
local record = frame(len_field(1, features))

bv.fs.mkdirs(dir)
local per_shard = 256
local nrec = (mb * 1024 * 1024) // #record
local shards, written = {}, 0
local chunk = record:rep(per_shard)
while written < nrec do
  local n = math.min(per_shard, nrec - written)
  local path = string.format("%s/rss.tfrecord-%05d", dir, #shards)
  local f = assert(io.open(path, "wb"))
  assert(f:write(n == per_shard and chunk or record:rep(n)))
  assert(f:close())
  shards[#shards + 1] = {file = path}
  written = written + n
end
print(string.format("wrote %d records (%.1f MB) in %d shards under %s", nrec,
                    nrec * #record / 2^20, #shards, dir))

else
local shards, ondisk = {}, 0
for _, name in ipairs(bv.fs.list(dir)) do
  if name:match("^rss%.tfrecord%-") then
    shards[#shards + 1] = {file = dir .. "/" .. name}
    local f = assert(io.open(dir .. "/" .. name, "rb"))
    ondisk = ondisk + f:seek("end")
    f:close()
  end
end
local before = bv.usage().max_rss_bytes
local t0 = os.clock()
local it = bv.data.inference({data = {name = "bv:tfrecord", shards = shards},
                              batch_size = batch_size, pp = "keep('image', 'label')"},
                             {workers = workers})
local n, bytes = 0, 0
while true do
  local b = it:next()
  if not b then break end
  for i, real in ipairs(b._mask:totable()) do
    if real then
      n = n + 1
      bytes = bytes + #b.image[i]
    end
  end
end
it:close()
local after = bv.usage().max_rss_bytes
print(string.format("read %d records, %.1f MB of image bytes, from %d shards (%.1f MB on disk)",
                    n, bytes / 2^20, #shards, ondisk / 2^20))
print(string.format("peak RSS: %.1f MB before reading, %.1f MB after (+%.1f MB); CPU %.1f s",
                    before / 2^20, after / 2^20, (after - before) / 2^20, os.clock() - t0))
end
