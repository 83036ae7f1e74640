-- The "lines" data set of big_vision's GPU tutorial: count where two polylines cross.
--
--   bvlua run scripts/make_lines.lua OUTDIR [--train N] [--val N] [--test N] [--seed S]
--
-- Defaults: 10000 / 1000 / 1000 images, seed 0. Writes OUTDIR/train_00000.png, ... (and val_,
-- test_) and OUTDIR/{train,val,test}.jsonl, one object per image:
--
--   {"image":"train_00000.png","label":1,"points_a":[[0,57],[112,190],[223,31]],"points_b":...}
--
-- Each image is 224x224 RGB on white with two 3-point polylines, A in red and B in blue, 3 px
-- thick. Both share the x coordinates 0, 112 and 223; the y coordinates are random. Points are
-- 0-based pixel coordinates [x, y] (x = column, y = row from the top), as in the image file.
--
-- The label is the number of crossings, 0, 1 or 2: with d_i = yA_i - yB_i at the i-th shared x,
-- segment i (between x_i and x_i+1) holds a crossing exactly when d_i and d_i+1 have opposite
-- signs (both polylines are straight there, so their difference is linear). To keep labels
-- unambiguous, B is redrawn until |d_i| >= 10 at every shared x: the lines never touch or
-- cross at a shared x, and where they do not cross they stay 10 px apart vertically.
--
-- The same seed gives the same files byte for byte; each split draws from its own stream, so
-- changing --train does not change val or test.
local json = require "bv.json"

local SIZE = 224
local XS = {0, 112, 223}
local Y_MIN, Y_MAX = 8, SIZE - 9  -- keeps the 3 px lines clear of the border
local MIN_GAP = 10
local THICKNESS = 3
local RED, BLUE = {255, 0, 0}, {0, 0, 255}
local PNG_LEVEL = 1  -- zlib level: these flat images compress well even at the fastest level

local USAGE = "usage: bvlua run scripts/make_lines.lua OUTDIR [--train N] [--val N] [--test N]"
  .. " [--seed S]"

-- Number of segments where the sign of yA - yB changes (the label; see the header).
local function crossings(a, b)
  local n = 0
  for i = 1, #a - 1 do
    local d0, d1 = a[i][2] - b[i][2], a[i + 1][2] - b[i + 1][2]
    if (d0 < 0) ~= (d1 < 0) then n = n + 1 end
  end
  return n
end

local function random_polyline(rng)
  local points = {}
  for i, x in ipairs(XS) do points[i] = {x, rng:integer(Y_MIN, Y_MAX)} end
  return points
end

-- A random pair of polylines at least MIN_GAP apart (vertically) at every shared x.
local function sample_pair(rng)
  local a = random_polyline(rng)
  while true do
    local b = random_polyline(rng)
    local ok = true
    for i = 1, #XS do
      if math.abs(a[i][2] - b[i][2]) < MIN_GAP then ok = false end
    end
    if ok then return a, b end
  end
end

local function draw(a, b)
  local img = bv.full({SIZE, SIZE, 3}, 255, "uint8")
  for _, line in ipairs({{a, RED}, {b, BLUE}}) do
    local p, color = line[1], line[2]
    for i = 1, #p - 1 do
      -- draw_line takes 1-based coordinates; the points are 0-based.
      bv.image.draw_line(img, p[i][1] + 1, p[i][2] + 1, p[i + 1][1] + 1, p[i + 1][2] + 1, color,
                         THICKNESS)
    end
  end
  return img
end

-- Plain writes, not bv.fs.write_file: its fsync per file made the default run take 44 s
-- instead of 28 s on a 2-core machine; the jsonl that names the images is written atomically
-- after them instead.
local function write_image(path, bytes)
  local f = assert(io.open(path, "wb"))
  assert(f:write(bytes))
  assert(f:close())
end

-- Writes n images of one split and then its jsonl (last, atomically: a complete jsonl means
-- every image it names is on disk). Returns the count of each label.
local function write_split(outdir, split, n, rng)
  local lines, counts = {}, {[0] = 0, [1] = 0, [2] = 0}
  for i = 0, n - 1 do
    local a, b = sample_pair(rng)
    local label = crossings(a, b)
    local name = string.format("%s_%05d.png", split, i)
    write_image(outdir .. "/" .. name, bv.image.encode_png(draw(a, b), PNG_LEVEL))
    lines[#lines + 1] = json.encode({image = name, label = label, points_a = a, points_b = b})
    counts[label] = counts[label] + 1
  end
  bv.fs.write_file(outdir .. "/" .. split .. ".jsonl",
                   table.concat(lines, "\n") .. (n > 0 and "\n" or ""))
  return counts
end

local function parse_args(...)
  local args = {...}
  local opts = {train = 10000, val = 1000, test = 1000, seed = 0}
  local i = 1
  while i <= #args do
    local a = args[i]
    local key = a:match("^%-%-(%a+)$")
    if key then
      if not (key == "train" or key == "val" or key == "test" or key == "seed") then
        error("make_lines: unknown option " .. a .. "\n" .. USAGE, 0)
      end
      local v = math.tointeger(tonumber(args[i + 1]))
      if not v or (key ~= "seed" and v < 0) then
        local what = key == "seed" and "an integer" or "a non-negative integer"
        error(string.format("make_lines: %s needs %s, got %s\n%s", a, what,
                            tostring(args[i + 1]), USAGE), 0)
      end
      opts[key] = v
      i = i + 2
    elseif a:sub(1, 1) == "-" or opts.outdir then
      error("make_lines: unexpected argument " .. a .. "\n" .. USAGE, 0)
    else
      opts.outdir = a
      i = i + 1
    end
  end
  if not opts.outdir then error("make_lines: OUTDIR is missing\n" .. USAGE, 0) end
  return opts
end

-- Runs with the script's arguments; returns {split = {[label] = count}} for callers that load
-- the script as a function (the tests).
local function main(...)
  local opts = parse_args(...)
  bv.fs.mkdirs(opts.outdir)
  -- One image at a time is too little work to share: libtorch's worker threads would only spin
  -- beside the PNG encoder (measured: 3.5 ms an image with 2 threads, 1.2 ms with 1).
  local threads = bv.threads()
  bv.threads(1)
  local base = bv.rng(opts.seed)
  local streams = {train = base:split(), val = base:split(), test = base:split()}
  local summary = {}
  for _, split in ipairs({"train", "val", "test"}) do
    local start = os.clock()
    local counts = write_split(opts.outdir, split, opts[split], streams[split])
    summary[split] = counts
    print(string.format("%-5s %6d images  labels 0/1/2: %d/%d/%d  (%.1f s CPU)", split, opts[split],
                        counts[0], counts[1], counts[2], os.clock() - start))
  end
  bv.threads(threads)
  return summary
end

return main(...)
