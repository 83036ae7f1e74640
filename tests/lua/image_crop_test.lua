-- bv.image crops and flips from Lua: 1-based offsets, size arguments, inception-crop options in
-- percent, errors with file:line, determinism with bv.rng(seed).
local T = require "tests.lua.lib.testing"

local THIS_FILE = "image_crop_test.lua:"

-- An HxWxC int64 image whose value at 1-based (y, x, c) is 100*y + 10*x + c.
local function coded(h, w, c)
  local rows = {}
  for y = 1, h do
    local row = {}
    for x = 1, w do
      local px = {}
      for k = 1, c do px[k] = 100 * y + 10 * x + k end
      row[x] = px
    end
    rows[y] = row
  end
  return bv.tensor(rows)
end

-- True when `t` is exactly the 1-based window (y, x, h, w) of a coded image.
local function is_window(t, y, x, h, w, c)
  T.eq(t:shape(), {h, w, c})
  local v = t:totable()
  for i = 1, h do
    for j = 1, w do
      for k = 1, c do
        if v[i][j][k] ~= 100 * (y + i - 1) + 10 * (x + j - 1) + k then return false end
      end
    end
  end
  return true
end

T.test("crop takes 1-based offsets", function()
  local img = coded(4, 5, 3)
  local out = bv.image.crop(img, 2, 3, 2, 3)
  T.truthy(is_window(out, 2, 3, 2, 3, 3), "window at y=2, x=3")
  T.eq(out:totable()[1][1], {231, 232, 233})
  T.eq(bv.image.crop(img, 1, 1, 4, 5):totable(), img:totable())
  T.eq(bv.image.crop(img, 4, 5, 1, 1):totable(), {{{451, 452, 453}}})
  -- The crop is a new tensor: writing into it leaves the source alone.
  bv.image.crop(img, 1, 1, 2, 2):fill_(0)
  T.eq(img:totable()[1][1][1], 111)
  -- HxW images too.
  local gray = bv.tensor({{1, 2, 3}, {4, 5, 6}}, "uint8")
  T.eq(bv.image.crop(gray, 2, 2, 1, 2):totable(), {{5, 6}})
end)

T.test("crop errors speak 1-based and carry file:line", function()
  local img = coded(4, 5, 3)
  local msg = T.raises(function() bv.image.crop(img, 0, 1, 2, 2) end, "y=0, x=1 (1-based)")
  T.truthy(msg:find(THIS_FILE, 1, true), "file:line in " .. msg)
  T.truthy(msg:find("[4x5x3]", 1, true), "shape in " .. msg)
  T.raises(function() bv.image.crop(img, 4, 1, 2, 2) end, "does not fit")
  T.raises(function() bv.image.crop(img, 1, 2, 1, 5) end, "does not fit")
  T.raises(function() bv.image.crop(img, 1, 1, 0, 1) end, "h=0")
  T.raises(function() bv.image.crop(bv.zeros({3}), 1, 1, 1, 1) end, "HxWxC")
  T.raises(function() bv.image.crop(img, 1.5, 1, 1, 1) end, "integer")
end)

T.test("central_crop: integer, {h, w}, or the largest square", function()
  local img = coded(6, 9, 2)
  T.truthy(is_window(bv.image.central_crop(img, 4), 2, 3, 4, 4, 2), "4x4")
  T.truthy(is_window(bv.image.central_crop(img, {3, 2}), 2, 4, 3, 2, 2), "3x2")  -- odd: (6-3)//2
  T.truthy(is_window(bv.image.central_crop(img), 1, 2, 6, 6, 2), "largest square")
  T.truthy(is_window(bv.image.central_crop(img, 0), 1, 2, 6, 6, 2), "size 0 = largest square")
  local big = bv.zeros({640, 480, 3}, "uint8")  -- big_vision's test image shape
  T.eq(bv.image.central_crop(big, {20, 80}):shape(), {20, 80, 3})
  local msg = T.raises(function() bv.image.central_crop(img, {7, 2}) end, "7x2")
  T.truthy(msg:find("6x9", 1, true) and msg:find(THIS_FILE, 1, true), msg)
  T.raises(function() bv.image.central_crop(img, {3}) end, "{h, w}")
  T.raises(function() bv.image.central_crop(img, {3, "a"}) end, "size[2]")
end)

T.test("random_crop is deterministic per seed and stays inside", function()
  local img = coded(10, 12, 3)
  local a = bv.image.random_crop(img, {4, 5}, bv.rng(1))
  local b = bv.image.random_crop(img, {4, 5}, bv.rng(1))
  T.eq(a:totable(), b:totable())
  local rng = bv.rng(2)
  local seen = {}
  for _ = 1, 200 do
    local out = bv.image.random_crop(img, 9, rng)
    local v = out:totable()[1][1][1]  -- 100*y + 10*x + 1 of the top-left pixel
    local y, x = v // 100, (v % 100) // 10
    T.truthy(y >= 1 and y <= 2 and x >= 1 and x <= 4, "offsets in range")
    T.truthy(is_window(out, y, x, 9, 9, 3), "window")
    seen[y .. "," .. x] = true
  end
  local n = 0
  for _ in pairs(seen) do n = n + 1 end
  T.eq(n, 8, "every offset pair of [1,2]x[1,4] (inclusive ends) occurs")
  local big = bv.zeros({640, 480, 3}, "uint8")
  T.eq(bv.image.random_crop(big, {120, 80}, rng):shape(), {120, 80, 3})
  T.raises(function() bv.image.random_crop(img, 11, rng) end, "larger than the 10x12 image")
  T.raises(function() bv.image.random_crop(img, 4) end, "bv.Rng")
end)

T.test("sample_inception_box: 1-based, in range, deterministic", function()
  local function boxes(seed, n, opts)
    local rng, out = bv.rng(seed), {}
    for i = 1, n do out[i] = {bv.image.sample_inception_box(480, 640, rng, opts)} end
    return out
  end
  T.eq(boxes(5, 20), boxes(5, 20))
  T.truthy(not T.deep_eq(boxes(5, 20), boxes(6, 20)), "another seed, other boxes")
  for _, b in ipairs(boxes(7, 500, {area_min = 30, area_max = 60})) do
    local y, x, h, w = table.unpack(b)
    T.truthy(y >= 1 and x >= 1, "1-based offsets")
    -- TF's offsets have an exclusive bound: a shorter box never reaches the last row.
    T.truthy(y + h - 1 < 480 and x + w - 1 < 640, "inside, off the last row and column")
    local frac = h * w / (480 * 640)
    T.truthy(frac >= 0.3 - 1e-6 and frac <= 0.6 + 1e-6, "area in percent range: " .. frac)
    T.truthy(w >= 0.75 * h - 0.5 and w <= 1.33 * h + 0.5, "aspect ratio")
  end
  -- Impossible constraints: the whole image.
  T.eq({bv.image.sample_inception_box(1, 1000, bv.rng(1))}, {1, 1, 1, 1000})
  T.eq({bv.image.sample_inception_box(5, 5, bv.rng(1), {area_min = 80, area_max = 20})},
       {1, 1, 5, 5})
  T.raises(function() bv.image.sample_inception_box(5, 5, bv.rng(1), {area_mni = 8}) end,
           "unknown option 'area_mni'")
  T.raises(function() bv.image.sample_inception_box(5, 5, bv.rng(1), {area_max = 150}) end,
           "area_max 150 must lie in (0, 100]")
  T.raises(function() bv.image.sample_inception_box(5, 5, bv.rng(1), {ratio_min = "x"}) end,
           "ratio_min must be a number")
end)

T.test("inception_crop = sample_inception_box + crop", function()
  local img = coded(30, 40, 3)
  local opts = {area_min = 20, ratio_min = 0.5, ratio_max = 2, max_attempts = 10}
  local y, x, h, w = bv.image.sample_inception_box(30, 40, bv.rng(3), opts)
  local out = bv.image.inception_crop(img, bv.rng(3), opts)
  T.truthy(is_window(out, y, x, h, w, 3), "same box for the same seed")
  T.eq(bv.image.inception_crop(bv.zeros({640, 480, 3}, "uint8"), bv.rng(0)):size(3), 3)
  local msg = T.raises(function() bv.image.inception_crop(img, bv.rng(0), {max_attempts = 0}) end,
                       "max_attempts")
  T.truthy(msg:find(THIS_FILE, 1, true), msg)
end)

T.test("flip_lr and flip_ud", function()
  local img = bv.tensor({{1, 2, 3}, {4, 5, 6}}, "uint8")
  T.eq(bv.image.flip_lr(img):totable(), {{3, 2, 1}, {6, 5, 4}})
  T.eq(bv.image.flip_ud(img):totable(), {{4, 5, 6}, {1, 2, 3}})
  local rgb = bv.tensor({{{1, 2}, {3, 4}}}, "float32")
  T.eq(bv.image.flip_lr(rgb):totable(), {{{3, 4}, {1, 2}}})
  T.eq(bv.image.flip_lr(img):dtype(), "uint8")
  local msg = T.raises(function() bv.image.flip_ud(bv.zeros({2, 2, 2, 2})) end, "flip_ud")
  T.truthy(msg:find(THIS_FILE, 1, true), msg)
end)

T.run()
