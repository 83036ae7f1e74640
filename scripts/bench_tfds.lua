-- The tfds benchmark's bvlua side (scripts/bench's tfds section runs it next to
-- scripts/bench_tfds_peer.py, on the same files).
--   bvlua --threads 1 run scripts/bench_tfds.lua DATA_DIR NAME SPLIT PP WORKERS PASSES
-- prints "EXAMPLES/S CPU_MS": the split read from the TFDS dataset NAME prepared in DATA_DIR
-- (bv.tfds: its tfrecord shards in TFDS's order) through the pp into batches of 32 by
-- bv.data.inference, as an evaluator reads it (every example once, in order), with WORKERS
-- workers of one intra-op thread each. One untimed pass first (page cache, the workers' first
-- pp), then the fastest of PASSES timed ones, each from the iterator's creation to its last
-- batch; CPU_MS is the process's CPU time (all its threads) per example over the timed passes,
-- which a busy machine disturbs less than the wall clock does.
local data = require "bv.data"

local function usage()
  error("usage: bvlua run scripts/bench_tfds.lua DATA_DIR NAME SPLIT PP WORKERS PASSES", 0)
end

local dir, name, split, pp = arg[1], arg[2], arg[3], arg[4]
local workers, passes = math.tointeger(tonumber(arg[5])), math.tointeger(tonumber(arg[6]))
if not (dir and name and split and pp and workers and passes) or workers < 1 or passes < 1 then
  usage()
end

local cfg = {data = {name = name, split = split, data_dir = dir}, pp = pp .. "|keep('image')",
             batch_size = 32}

-- One pass over the split: its seconds and how many examples it gave (padding not counted).
local function pass()
  local start = bv.clock()
  local it = data.inference(cfg, {workers = workers})
  local count = 0
  while true do
    local b = it:next()
    if not b then break end
    count = count + b._mask:sum():item()
  end
  return bv.clock() - start, count
end

local _, expected = pass()
local best, cpu = math.huge, os.clock()
for _ = 1, passes do
  local t, count = pass()
  if count ~= expected then
    error(string.format("bench_tfds: a pass gave %d examples, the first %d", count, expected), 0)
  end
  best = math.min(best, t)
end
cpu = os.clock() - cpu
print(string.format("%.1f %.3f", expected / best, cpu * 1000 / (expected * passes)))
