-- bv.image.randaug / bv.image.augment from Lua: determinism per bv.rng seed, shape and dtype
-- kept, the level -> argument mapping of a few ops, fix_contrast, errors with file:line.
local T = require "tests.lua.lib.testing"

local THIS_FILE = "image_randaug_test.lua:"

-- An HxWx3 uint8 image with varied values: (37y + 23x^2 + 11k + 5) % 250 (0-based y, x, k).
local function generic(h, w)
  local rows = {}
  for y = 0, h - 1 do
    local row = {}
    for x = 0, w - 1 do
      local px = {}
      for k = 0, 2 do px[k + 1] = (37 * y + 23 * x * x + 11 * k + 5) % 250 end
      row[x + 1] = px
    end
    rows[y + 1] = row
  end
  return bv.tensor(rows, "uint8")
end

T.test("randaug is deterministic per seed and keeps shape and dtype", function()
  local img = generic(12, 10)
  local a = bv.image.randaug(img, 2, 10, bv.rng(7))
  local b = bv.image.randaug(img, 2, 10, bv.rng(7))
  T.eq(a:shape(), {12, 10, 3})
  T.eq(a:dtype(), "uint8")
  T.eq(a:totable(), b:totable())
  T.eq(img:totable(), generic(12, 10):totable(), "the input is left alone")
  local differ = 0
  for seed = 1, 10 do
    if bv.image.randaug(img, 2, 10, bv.rng(seed)) ~= a then differ = differ + 1 end
  end
  T.truthy(differ >= 5, "other seeds give other images (" .. differ .. " of 10)")
  -- One stream through several images: each call continues where the last stopped.
  local r1, r2 = bv.rng(3), bv.rng(3)
  local first = bv.image.randaug(img, 2, 15, r1)
  T.eq(first, bv.image.randaug(img, 2, 15, r2))
  T.eq(bv.image.randaug(img, 2, 15, r1), bv.image.randaug(img, 2, 15, r2))
  T.eq(bv.image.randaug(img, 0, 10, bv.rng(1)), img, "zero layers")
  local big = bv.zeros({224, 224, 3}, "uint8")
  T.eq(bv.image.randaug(big, 2, 20, bv.rng(0)):shape(), {224, 224, 3})
end)

T.test("randaug(2, 0) changes the image for some seeds", function()
  local img = generic(8, 8)
  local changed = 0
  for seed = 1, 20 do
    if bv.image.randaug(img, 2, 0, bv.rng(seed)) ~= img then changed = changed + 1 end
  end
  T.truthy(changed > 0, "level 0 is not a no-op")
end)

T.test("augment: one op by name at a level", function()
  T.eq(#bv.image.randaug_ops, 16)
  T.eq(bv.image.randaug_ops[1], "AutoContrast")
  T.eq(bv.image.randaug_ops[5], "Posterize")
  T.eq(bv.image.randaug_ops[16], "SolarizeAdd")
  local img = bv.tensor({{{0, 127, 128}, {129, 200, 255}}}, "uint8")
  -- Posterize level 0: 0 bits, TF clamps the shift 8 to 7, leaving x & 128.
  T.eq(bv.image.augment(img, "Posterize", 0):totable(), {{{0, 0, 128}, {128, 128, 128}}})
  -- Level 10: 4 bits, x & 0xF0.
  T.eq(bv.image.augment(img, "posterize", 10):totable(), {{{0, 112, 128}, {128, 192, 240}}})
  -- Solarize level 0 (threshold 0) and level 10 (256, i.e. 0 as a uint8): full inversion.
  local inverted = {{{255, 128, 127}, {126, 55, 0}}}
  T.eq(bv.image.augment(img, "Solarize", 0):totable(), inverted)
  T.eq(bv.image.augment(img, "Solarize", 10):totable(), inverted)
  T.eq(bv.image.augment(img, "Invert", 3):totable(), inverted)
  -- SolarizeAdd level 10: +110 below 128.
  T.eq(bv.image.augment(img, "solarize_add", 10):totable(), {{{110, 237, 128}, {129, 200, 255}}})
  -- Random ops take the rng; the same seed gives the same result.
  local g = generic(6, 7)
  T.eq(bv.image.augment(g, "Rotate", 10, bv.rng(4)), bv.image.augment(g, "Rotate", 10, bv.rng(4)))
  T.eq(bv.image.augment(g, "cutout", 0, bv.rng(4)), g, "pad 0")
  T.raises(function() bv.image.augment(g, "TranslateX", 5) end, "needs an rng")
  T.raises(function() bv.image.augment(g, "Blur", 5) end, "unknown op 'Blur'")
end)

T.test("fix_contrast blends with the mean grey instead of (H*W)/256", function()
  -- A flat 100 image of 16x80 pixels: the bug's mean is 1280 / 256 = 5, so level 10
  -- (factor 1.9) gives 5 + 1.9 * 95 = 185.5 -> 185; the real mean is 100: unchanged.
  local flat = bv.zeros({16, 80, 3}, "uint8") + 100
  T.eq(bv.image.augment(flat, "Contrast", 10):max():item(), 185)
  T.eq(bv.image.augment(flat, "Contrast", 10):min():item(), 185)
  T.eq(bv.image.augment(flat, "Contrast", 10, nil, true), flat)
  -- Through randaug: the flag changes results only where Contrast is drawn.
  local g = generic(16, 16)
  local differ = 0
  for seed = 1, 40 do
    local a = bv.image.randaug(g, 1, 10, bv.rng(seed))
    local b = bv.image.randaug(g, 1, 10, bv.rng(seed), true)
    if a ~= b then differ = differ + 1 end
  end
  T.truthy(differ > 0 and differ < 40, "only the Contrast draws differ: " .. differ)
end)

T.test("errors name the problem and carry file:line", function()
  local msg = T.raises(function() bv.image.randaug(bv.zeros({4, 4, 3}), 2, 10, bv.rng(0)) end,
                       "expected a uint8 HxWx3 image")
  T.truthy(msg:find("[4x4x3] float32", 1, true), msg)
  T.truthy(msg:find(THIS_FILE, 1, true), msg)
  msg = T.raises(function() bv.image.randaug(bv.zeros({4, 4}, "uint8"), 2, 10, bv.rng(0)) end,
                 "[4x4] uint8")
  T.truthy(msg:find(THIS_FILE, 1, true), msg)
  msg = T.raises(function() bv.image.randaug(bv.zeros({4, 4, 4}, "uint8"), 2, 10, bv.rng(0)) end,
                 "[4x4x4] uint8")
  T.raises(function() bv.image.randaug(generic(4, 4), -1, 10, bv.rng(0)) end, "num_layers -1 must be")
  T.raises(function() bv.image.randaug(generic(4, 4), 2, -1, bv.rng(0)) end, "magnitude -1")
  T.raises(function() bv.image.randaug(generic(4, 4), 2, 10) end, "bv.Rng")
  T.raises(function() bv.image.randaug(generic(4, 4), 1.5, 10, bv.rng(0)) end, "integer")
  msg = T.raises(function() bv.image.augment(generic(4, 4), "Nope", 1) end, "AutoContrast")
  T.truthy(msg:find(THIS_FILE, 1, true), msg)
end)

T.run()
