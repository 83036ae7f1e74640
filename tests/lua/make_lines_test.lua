-- scripts/make_lines.lua: file layout, jsonl fields, labels against crossings recomputed here
-- from the stored points, the drawn pixels, determinism per seed, split independence, usage
-- errors. The script is loaded as a function and called with its command-line arguments.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local SCRIPT = "scripts/make_lines.lua"
local make_lines = assert(loadfile(SCRIPT))

local SPLITS = {"train", "val", "test"}

local function temp_dir()
  local path = os.tmpname()
  os.remove(path)
  bv.fs.mkdirs(path)
  return path
end

local function read_jsonl(path)
  local rows = {}
  for line in bv.fs.read_file(path):gmatch("[^\n]+") do rows[#rows + 1] = json.decode(line) end
  return rows
end

-- Crossings from the points alone, written independently of the script: the lines are straight
-- between shared x coordinates, so they cross in a segment exactly when yA - yB changes sign.
local function count_crossings(a, b)
  local n = 0
  for i = 1, 2 do
    local before, after = a[i][2] - b[i][2], a[i + 1][2] - b[i + 1][2]
    if before * after < 0 then n = n + 1 end
  end
  return n
end

-- Runs the script into a new directory; returns the directory and the per-split sizes.
local function run(sizes, seed)
  local dir = temp_dir()
  make_lines(dir, "--train", tostring(sizes[1]), "--val", tostring(sizes[2]), "--test",
             tostring(sizes[3]), "--seed", tostring(seed))
  return dir, {train = sizes[1], val = sizes[2], test = sizes[3]}
end

local function remove_all(dir, sizes)
  for _, split in ipairs(SPLITS) do
    for i = 0, sizes[split] - 1 do os.remove(string.format("%s/%s_%05d.png", dir, split, i)) end
    os.remove(dir .. "/" .. split .. ".jsonl")
  end
  os.remove(dir)
end

local function png_path(dir, split, i)
  return string.format("%s/%s_%05d.png", dir, split, i)
end

local small_dir, small_sizes = run({30, 10, 10}, 3)

T.test("writes one PNG per example and a jsonl per split", function()
  for _, split in ipairs(SPLITS) do
    local n = small_sizes[split]
    local rows = read_jsonl(small_dir .. "/" .. split .. ".jsonl")
    T.eq(#rows, n, split .. " rows")
    for i = 0, n - 1 do
      T.truthy(bv.fs.exists(png_path(small_dir, split, i)), png_path(small_dir, split, i))
      T.eq(rows[i + 1].image, string.format("%s_%05d.png", split, i))
    end
    T.truthy(not bv.fs.exists(png_path(small_dir, split, n)), "no extra image in " .. split)
  end
end)

T.test("labels are 0, 1 or 2 and equal the crossings of the stored points", function()
  for _, split in ipairs(SPLITS) do
    for _, row in ipairs(read_jsonl(small_dir .. "/" .. split .. ".jsonl")) do
      T.truthy(row.label == 0 or row.label == 1 or row.label == 2, "label " .. tostring(row.label))
      T.eq(#row.points_a, 3)
      T.eq(#row.points_b, 3)
      for i, x in ipairs({0, 112, 223}) do
        T.eq(row.points_a[i][1], x)
        T.eq(row.points_b[i][1], x)
        for _, p in ipairs({row.points_a[i], row.points_b[i]}) do
          T.truthy(p[2] >= 0 and p[2] <= 223, "y inside the image: " .. p[2])
        end
        -- No ties at a shared x: the sign of yA - yB is always defined.
        T.truthy(row.points_a[i][2] ~= row.points_b[i][2], row.image .. ": lines meet at x " .. x)
      end
      T.eq(row.label, count_crossings(row.points_a, row.points_b), row.image)
    end
  end
end)

T.test("images are 224x224 RGB with red A and blue B through the stored points", function()
  for _, row in ipairs(read_jsonl(small_dir .. "/val.jsonl")) do
    local img = bv.image.read(small_dir .. "/" .. row.image)
    T.eq(img:shape(), {224, 224, 3})
    T.eq(img:dtype(), "uint8")
    for i = 1, 3 do
      local a, b = row.points_a[i], row.points_b[i]
      -- Points are 0-based [x, y]; tensor indices are 1-based [row][column].
      T.eq(img[a[2] + 1][a[1] + 1]:totable(), {255, 0, 0}, row.image .. " A point " .. i)
      T.eq(img[b[2] + 1][b[1] + 1]:totable(), {0, 0, 255}, row.image .. " B point " .. i)
    end
    T.truthy(img[1]:eq(255):all(), "the top row stays white")
    -- Nothing but white, red and blue: no blending where the lines overlap.
    local n = 0
    for _, colour in ipairs({{255, 255, 255}, {255, 0, 0}, {0, 0, 255}}) do
      local mask = bv.ones({224, 224}, "int32")
      for c = 1, 3 do mask = mask * img[{{}, {}, c}]:eq(colour[c]):to("int32") end
      n = n + mask:sum():item()
    end
    T.eq(n, 224 * 224, row.image .. ": pixels of the three colours")
  end
end)

T.test("all three labels occur in a larger sample, about 1/4, 1/2, 1/4", function()
  local dir, sizes = run({200, 0, 0}, 11)
  local counts = {[0] = 0, [1] = 0, [2] = 0}
  for _, row in ipairs(read_jsonl(dir .. "/train.jsonl")) do
    counts[row.label] = counts[row.label] + 1
  end
  for label = 0, 2 do T.truthy(counts[label] >= 25, "label " .. label .. ": " .. counts[label]) end
  T.truthy(counts[1] >= 70 and counts[1] <= 130, "label 1: " .. counts[1])
  T.eq(bv.fs.read_file(dir .. "/val.jsonl"), "")
  remove_all(dir, sizes)
end)

T.test("the same seed gives identical files; another seed differs", function()
  local again, sizes = run({30, 10, 10}, 3)
  for _, split in ipairs(SPLITS) do
    T.eq(bv.fs.read_file(again .. "/" .. split .. ".jsonl"),
         bv.fs.read_file(small_dir .. "/" .. split .. ".jsonl"), split .. ".jsonl")
  end
  T.eq(bv.fs.read_file(png_path(again, "train", 17)),
       bv.fs.read_file(png_path(small_dir, "train", 17)))
  T.eq(bv.fs.read_file(png_path(again, "test", 9)), bv.fs.read_file(png_path(small_dir, "test", 9)))
  remove_all(again, sizes)

  local other, other_sizes = run({30, 10, 10}, 4)
  T.truthy(bv.fs.read_file(other .. "/train.jsonl") ~= bv.fs.read_file(small_dir .. "/train.jsonl"))
  T.truthy(bv.fs.read_file(png_path(other, "train", 0)) ~=
           bv.fs.read_file(png_path(small_dir, "train", 0)))
  remove_all(other, other_sizes)
end)

T.test("each split has its own stream: --train does not change val or test", function()
  local dir, sizes = run({5, 10, 10}, 3)
  T.eq(bv.fs.read_file(dir .. "/val.jsonl"), bv.fs.read_file(small_dir .. "/val.jsonl"))
  T.eq(bv.fs.read_file(dir .. "/test.jsonl"), bv.fs.read_file(small_dir .. "/test.jsonl"))
  remove_all(dir, sizes)
end)

T.test("usage errors name the problem", function()
  T.raises(function() make_lines() end, "OUTDIR is missing")
  T.raises(function() make_lines("x", "--trian", "3") end, "unknown option --trian")
  T.raises(function() make_lines("x", "--train", "many") end,
           "--train needs a non-negative integer")
  T.raises(function() make_lines("x", "--val", "-1") end, "--val needs a non-negative integer")
  T.raises(function() make_lines("x", "y") end, "unexpected argument y")
end)

-- Last, so it runs even when a case above failed (T.run exits non-zero after all cases).
T.test("clean up", function()
  remove_all(small_dir, small_sizes)
  T.truthy(not bv.fs.exists(small_dir), small_dir .. " removed")
end)

T.run()
