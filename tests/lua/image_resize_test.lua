-- bv.image.resize / resize_small / resize_long from Lua: sizes as n or {h, w}, big_vision's
-- defaults, dtype kept, errors that name the method or shape and carry this file's line.
local T = require "tests.lua.lib.testing"

-- 4x6 single-channel ramp v = 10*r + c^2 (0-based r, c), as in the C++ tests.
local function ramp(dtype)
  local rows = {}
  for r = 0, 3 do
    local row = {}
    for c = 0, 5 do row[#row + 1] = {10 * r + c * c} end
    rows[#rows + 1] = row
  end
  return bv.tensor(rows, dtype or "float32")
end

local function flat(t)
  local out = {}
  for _, row in ipairs(t:totable()) do
    for _, px in ipairs(row) do out[#out + 1] = type(px) == "table" and px[1] or px end
  end
  return out
end

local function near_all(got, want, tol)
  T.eq(#got, #want, "element count")
  for i = 1, #want do T.near(got[i], want[i], tol or 1e-4, "element " .. i) end
end

T.test("resize with an integer size is square; default method is bilinear", function()
  local img = bv.zeros({10, 20, 3}, "uint8")
  local out = bv.image.resize(img, 8)
  T.eq(out:shape(), {8, 8, 3})
  T.eq(out:dtype(), "uint8")
  -- Bilinear 2x down is the mean of each 2x2 block: (0 + 1 + 10 + 11) / 4 = 5.5.
  near_all(flat(bv.image.resize(ramp(), {2, 3})), {5.5, 11.5, 25.5, 25.5, 31.5, 45.5})
  -- The same through the explicit defaults.
  near_all(flat(bv.image.resize(ramp(), {2, 3}, "bilinear", false)),
           {5.5, 11.5, 25.5, 25.5, 31.5, 45.5})
end)

T.test("resize with {h, w}, each method, antialias", function()
  local img = ramp()
  T.eq(bv.image.resize(img, {6, 8}):shape(), {6, 8, 1})
  near_all(flat(bv.image.resize(img, {2, 3}, "nearest")), {11, 19, 35, 31, 39, 55})
  near_all(flat(bv.image.resize(img, {2, 3}, "area")), {5.5, 11.5, 25.5, 25.5, 31.5, 45.5})
  near_all(flat(bv.image.resize(img, {2, 3}, "bicubic")),
           {4.41176, 10.36765, 25.29412, 26.17647, 32.13235, 47.05882})
  -- Antialiased bilinear: a triangle widened to radius 2, so out[1][1] = 57/7.
  near_all(flat(bv.image.resize(img, {2, 3}, "bilinear", true)),
           {8.14286, 14.14286, 26.0, 23.85714, 29.85714, 41.71429})
  near_all(flat(bv.image.resize(img, {2, 3}, "bicubic", true)),
           {6.27781, 12.3983, 25.83848, 24.54227, 30.66277, 44.10294})
end)

T.test("HxW images stay HxW; uint8 truncates", function()
  local img = bv.tensor({{0, 103}}, "uint8")
  local out = bv.image.resize(img, {1, 8})
  T.eq(out:shape(), {1, 8})
  T.eq(out:totable(), {{0, 0, 12, 38, 64, 90, 103, 103}})  -- 12.875 -> 12, 38.625 -> 38
end)

T.test("resize_small and resize_long: shapes and defaults", function()
  local img = bv.zeros({640, 480, 3}, "uint8")
  T.eq(bv.image.resize(img, {120, 80}):shape(), {120, 80, 3})
  T.eq(bv.image.resize_small(img, 240):shape(), {320, 240, 3})
  T.eq(bv.image.resize_long(img, 320):shape(), {320, 240, 3})
  T.eq(bv.image.resize_small(img, 240, "bilinear", true):dtype(), "uint8")
  -- Round half to even: 7x2 with smaller side 3 -> 10.5 -> 10.
  T.eq(bv.image.resize_small(bv.zeros({7, 2}), 3):shape(), {10, 3})
  -- resize_small defaults to area: 4x6 -> smaller side 2 gives the 2x3 block means.
  near_all(flat(bv.image.resize_small(ramp(), 2)), {5.5, 11.5, 25.5, 25.5, 31.5, 45.5})
  -- resize_long defaults to area with antialias (ignored by area): same numbers.
  near_all(flat(bv.image.resize_long(ramp(), 3)), {5.5, 11.5, 25.5, 25.5, 31.5, 45.5})
  -- The antialias defaults show with bilinear: off for resize_small, on for resize_long.
  near_all(flat(bv.image.resize_small(ramp(), 2, "bilinear")), {5.5, 11.5, 25.5, 25.5, 31.5, 45.5})
  near_all(flat(bv.image.resize_long(ramp(), 3, "bilinear")),
           {8.14286, 14.14286, 26.0, 23.85714, 29.85714, 41.71429})
  near_all(flat(bv.image.resize_long(ramp(), 3, "bilinear", false)),
           {5.5, 11.5, 25.5, 25.5, 31.5, 45.5})
end)

T.test("errors name the method, the shape and this file's line", function()
  local img = bv.zeros({4, 4, 3}, "uint8")
  local msg = T.raises(function() bv.image.resize(img, 2, "lanczos3") end, "'lanczos3'")
  T.truthy(msg:find("bilinear, nearest, bicubic, area", 1, true), "lists the methods: " .. msg)
  T.truthy(msg:find("bv.image.resize", 1, true), "names the function: " .. msg)
  T.truthy(msg:find("image_resize_test.lua:%d+:"), "carries file:line: " .. msg)
  T.raises(function() bv.image.resize_small(img, 2, "cubic") end, "bv.image.resize_small")
  msg = T.raises(function() bv.image.resize(bv.zeros({2, 4, 4, 3}), 2) end, "2x4x4x3")
  T.truthy(msg:find("image_resize_test.lua:%d+:"), "carries file:line: " .. msg)
  T.raises(function() bv.image.resize(bv.zeros({4, 4, 3}, "float64"), 2) end, "float64")
  T.raises(function() bv.image.resize(img, 0) end, "0x0")
  T.raises(function() bv.image.resize(img, {2, 3, 4}) end, "{h, w}")
  T.raises(function() bv.image.resize(img, {2, "x"}) end, "two integers")
  T.raises(function() bv.image.resize(img, 2, "area", "yes") end, "boolean")
  T.raises(function() bv.image.resize_long(img, 2.5) end, "integer")
end)

T.run()
