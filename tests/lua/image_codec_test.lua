-- bv.image codecs from Lua: decode/encode round trips, options, peek, 1-based decode_crop,
-- files (write_png, write_jpeg, read), draw_line, and errors that carry file:line and name
-- the culprit.
local T = require "tests.lua.lib.testing"

local THIS_FILE = "image_codec_test.lua:"

-- A uint8 HxWxC image with varied values: (7y + 13x + 29c) mod 256 at 1-based (y, x, c).
local function pattern(h, w, c)
  local y = bv.arange(1, h + 1):view({h, 1, 1})
  local x = bv.arange(1, w + 1):view({1, w, 1})
  local k = bv.arange(1, c + 1):view({1, 1, c})
  return ((y * 7 + x * 13 + k * 29) % 256):to("uint8")
end

-- A fresh empty directory under the system's temp dir.
local function temp_dir()
  local path = os.tmpname()
  os.remove(path)
  bv.fs.mkdirs(path)
  return path
end

-- The line number of the caller, for checking that errors point at the calling line.
local function line_here()
  return debug.getinfo(2, "l").currentline
end

T.test("PNG round trip is exact for 1, 3 and 4 channels", function()
  for _, c in ipairs({1, 3, 4}) do
    local t = pattern(9, 14, c)
    local png = bv.image.encode_png(t)
    T.eq(type(png), "string")
    T.eq(png:sub(2, 4), "PNG")
    T.truthy(bv.image.decode(png, {channels = c}) == t, "channels " .. c)
    T.truthy(bv.image.decode(png, {channels = 0}) == t, "own channels " .. c)
  end
  -- A fast zlib level gives the same pixels.
  local t = pattern(20, 20, 3)
  T.truthy(bv.image.decode(bv.image.encode_png(t, 1)) == t)
end)

T.test("decode defaults to 3 channels; options convert", function()
  local grey = pattern(6, 8, 1)
  local png = bv.image.encode_png(grey)
  local rgb = bv.image.decode(png)
  T.eq(rgb:shape(), {6, 8, 3})
  T.truthy(rgb[{{}, {}, {2}}] == grey, "grey replicated")
  local rgba = bv.image.decode(bv.image.encode_png(pattern(6, 8, 4)))
  T.truthy(rgba == pattern(6, 8, 3), "alpha dropped")
  T.eq(bv.image.decode(png, {channels = 4}):shape(), {6, 8, 4})
  T.raises(function() bv.image.decode(png, {chanels = 1}) end, "unknown option 'chanels'")
  T.raises(function() bv.image.decode(png, {channels = 7}) end, "channels must be")
  T.raises(function() bv.image.decode(png, {precise = 1}) end, "opts.precise must be a boolean")
end)

T.test("JPEG encode/decode: close at quality 95; precise is an option", function()
  -- A smooth image (JPEG's easy case): a diagonal ramp, different per channel.
  local y = bv.arange(0, 32):view({32, 1, 1})
  local x = bv.arange(0, 40):view({1, 40, 1})
  local k = bv.arange(0, 3):view({1, 1, 3})
  local smooth = (y * 4 + x * 3 + k * 20):clamp(0, 255):to("uint8")
  local jpeg = bv.image.encode_jpeg(smooth)
  T.eq(jpeg:byte(1), 0xFF)
  T.eq(jpeg:byte(2), 0xD8)
  local fast = bv.image.decode(jpeg)
  local precise = bv.image.decode(jpeg, {precise = true})
  local err = (fast:to("float32") - smooth:to("float32")):abs():mean():item()
  T.truthy(err < 2, "mean abs error " .. err)
  T.eq(precise:shape(), {32, 40, 3})
  T.truthy(#bv.image.encode_jpeg(smooth, 20) < #jpeg, "lower quality, smaller file")
  T.raises(function() bv.image.encode_jpeg(smooth, 101) end, "quality must be 1..100")
end)

T.test("peek gives the header's shape and format", function()
  T.eq(bv.image.peek(bv.image.encode_png(pattern(5, 7, 4))),
       {height = 5, width = 7, channels = 4, format = "png"})
  T.eq(bv.image.peek(bv.image.encode_jpeg(pattern(5, 7, 1))),
       {height = 5, width = 7, channels = 1, format = "jpeg"})
end)

T.test("decode_crop takes a 1-based y, x and equals decode then crop", function()
  local t = pattern(12, 15, 3)
  for _, bytes in ipairs({bv.image.encode_png(t), bv.image.encode_jpeg(t)}) do
    local full = bv.image.decode(bytes)
    T.truthy(bv.image.decode_crop(bytes, 1, 1, 12, 15) == full, "whole image")
    T.truthy(bv.image.decode_crop(bytes, 2, 3, 4, 5) == full[{{2, 5}, {3, 7}}], "window")
    T.truthy(bv.image.decode_crop(bytes, 12, 15, 1, 1) == full[{{12}, {15}}], "last pixel")
    T.eq(bv.image.decode_crop(bytes, 2, 3, 4, 5, {channels = 1}):shape(), {4, 5, 1})
    T.raises(function() bv.image.decode_crop(bytes, 0, 1, 2, 2) end, "1-based")
    T.raises(function() bv.image.decode_crop(bytes, 10, 1, 5, 2) end, "does not lie inside")
  end
end)

T.test("write_png / write_jpeg / read round trip through files", function()
  local dir = temp_dir()
  local t = pattern(10, 11, 3)
  local png_path, jpg_path = dir .. "/a.png", dir .. "/b.jpg"
  bv.image.write_png(t, png_path)
  T.truthy(bv.image.read(png_path) == t, "png")
  T.eq(bv.fs.read_file(png_path), bv.image.encode_png(t))
  bv.image.write_png(t, png_path, 9)  -- overwrites, atomically
  T.truthy(bv.image.read(png_path) == t, "png level 9")
  bv.image.write_jpeg(t, jpg_path, 90)
  T.eq(bv.image.read(jpg_path):shape(), {10, 11, 3})
  T.eq(bv.image.read(jpg_path, {channels = 1}):shape(), {10, 11, 1})
  T.eq(bv.fs.read_file(jpg_path), bv.image.encode_jpeg(t, 90))
  os.remove(png_path)
  os.remove(jpg_path)
  os.remove(dir)
end)

T.test("errors carry file:line and name the culprit", function()
  local line = line_here() + 1
  local msg = T.raises(function() bv.image.decode("not an image at all") end,
                       "unknown image format")
  T.truthy(msg:find(THIS_FILE .. line .. ":", 1, true), "file:line in " .. msg)
  T.truthy(msg:find("6e 6f 74 20 61 6e 20 69", 1, true), "first bytes in hex: " .. msg)
  line = line_here() + 1
  msg = T.raises(function() bv.image.encode_png(bv.zeros({3, 4, 3})) end, "float32 [3x4x3]")
  T.truthy(msg:find(THIS_FILE .. line .. ":", 1, true), "file:line in " .. msg)

  local dir = temp_dir()
  local missing = dir .. "/no_such_image.png"
  msg = T.raises(function() bv.image.read(missing) end, missing)
  T.truthy(msg:find(THIS_FILE, 1, true), msg)
  local garbage = dir .. "/garbage.png"
  bv.fs.write_file(garbage, "GARBAGE!")
  T.raises(function() bv.image.read(garbage) end, "bv.image.read '" .. garbage .. "': decode")
  local t = pattern(30, 40, 3)
  local truncated = dir .. "/truncated.jpg"
  local jpeg = bv.image.encode_jpeg(t)
  bv.fs.write_file(truncated, jpeg:sub(1, #jpeg // 2))
  T.raises(function() bv.image.read(truncated) end, "truncated JPEG")
  T.raises(function() bv.image.decode(jpeg, {max_pixels = 100}) end,
           "image of 30x40 pixels (height x width) exceeds the cap of 100 (max_pixels)")
  T.raises(function() bv.image.write_png(t, dir .. "/no/such/dir/x.png") end, "no/such/dir/x.png")
  os.remove(garbage)
  os.remove(truncated)
  os.remove(dir)
end)

T.test("draw_line paints in place with 1-based coordinates", function()
  local img = bv.full({5, 6, 3}, 255, "uint8")
  local same = bv.image.draw_line(img, 1, 1, 1, 1, {255, 0, 0})
  T.truthy(rawequal(same, img), "returns its image argument")
  T.eq(img[1][1]:totable(), {255, 0, 0})
  T.eq(img[1][2]:totable(), {255, 255, 255})
  bv.image.draw_line(img, 2, 4, 6, 4, {0, 0, 255}, 1)  -- row 4, columns 2..6
  T.eq(img[{4, {}, 3}]:totable(), {255, 255, 255, 255, 255, 255})
  T.eq(img[{4, {}, 1}]:totable(), {255, 0, 0, 0, 0, 0})
  T.raises(function() bv.image.draw_line(img, 1, 1, 2, 2, {1, 2}) end, "colour of 2 values")
  T.raises(function() bv.image.draw_line(img, 1, 1, 2, 2, {1, 2, 300}) end, "color[3] = 300")
end)

T.run()
