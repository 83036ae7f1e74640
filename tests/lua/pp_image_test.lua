-- The image pp ops through bv.pp: big_vision's builder and ops_image tests (section 5.3, 5.5),
-- and each op's arguments reaching the native functions.
local T = require "tests.lua.lib.testing"
local pp = bv.pp

local function img640() return (bv.rand({640, 480, 3}, bv.rng(0)) * 255):to("uint8") end
local function run(spec, image, seed)
  return pp.build(spec)({image = image}, bv.rng(seed or 0)).image
end

T.test("builder (5.3)", function()
  T.eq(run("resize(256)", img640()):shape(), {256, 256, 3})
  T.eq(run("||inception_crop|||resize(256)||", img640()):shape(), {256, 256, 3})
  local out = run("inception_crop|resize(256)|resize((256, 256))|central_crop((80, 120))|flip_lr"
                  .. "|value_range(0,1)|value_range(-1,1)", img640())
  T.eq(out:shape(), {80, 120, 3})
  T.truthy(out:min():item() >= -1 and out:max():item() <= 1, "values in [-1, 1]")
  -- Applying to something that is not an example, or binding bad arguments, must fail.
  for _, spec in ipairs({"inception_crop(1)", "resize()", "resize(1, 1, 1)flip_lr(1)", "central_crop()"}) do
    T.raises(function() pp.build(spec)(img640(), bv.rng(0)) end)
  end
end)

T.test("ops_image shapes (5.5)", function()
  local img = img640()
  T.eq(run("resize([120, 80])", img):shape(), {120, 80, 3})
  T.eq(run("resize_small(240)", img):shape(), {320, 240, 3})
  T.eq(run("resize_long(320)", img):shape(), {320, 240, 3})
  T.eq(run("inception_crop()", img):shape()[3], 3)
  T.eq(run("random_crop([120, 80])", img):shape(), {120, 80, 3})
  T.eq(run("central_crop([20, 80])", img):shape(), {20, 80, 3})
  local flipped = run("flip_lr", img, 1)
  T.truthy(flipped == img or flipped == img:flip(2), "flip_lr gives the image or its mirror")
  local seen = {}
  for seed = 1, 20 do seen[run("flip_lr", img, seed) == img] = true end
  T.truthy(seen[true] and seen[false], "both outcomes over 20 seeds")
  T.eq(run("flip_ud", img, 1):shape(), {640, 480, 3})
  T.eq(run("randaug(2, 10)", run("resize(32)", img), 3):shape(), {32, 32, 3})
end)

T.test("decode and decode_jpeg_and_inception_crop (5.5)", function()
  local img = img640()
  local jpeg = bv.image.encode_jpeg(img, 90)
  local png = bv.image.encode_png(img)
  T.eq(pp.build("decode")({image = png}).image, img)
  T.eq(pp.build("decode")({image = jpeg}).image:shape(), {640, 480, 3})
  T.eq(pp.build("decode(precise=True)")({image = jpeg}).image:shape(), {640, 480, 3})
  local crop = pp.build("decode_jpeg_and_inception_crop()")({image = jpeg}, bv.rng(0)).image
  T.eq(crop:shape()[3], 3)
  local sized = pp.build("decode_jpeg_and_inception_crop(224)")({image = jpeg}, bv.rng(0)).image
  T.eq(sized:shape(), {224, 224, 3})
  T.raises(function() pp.build("decode")({image = img}) end, "decode: expected encoded bytes")
  T.raises(function() pp.build("decode")({image = "not an image"}) end, "pp op 'decode'")
end)

T.test("the same seed gives the same random crops", function()
  local img = img640()
  T.truthy(run("inception_crop(64)", img, 5) == run("inception_crop(64)", img, 5), "same seed")
  T.truthy(run("random_crop(64)", img, 5) == run("random_crop(64)", img, 5), "same seed")
  T.raises(function() pp.build("random_crop(64)")({image = img}) end, "needs a random stream")
end)

T.test("arguments reach the native ops", function()
  local ramp = bv.arange(0, 16):view({4, 4, 1}):to("uint8") * 16
  T.eq(run("resize(2, method='nearest')", ramp):view({4}):totable(), {16 * 5, 16 * 7, 16 * 13, 16 * 15})
  T.eq(run("central_crop(2)", ramp):view({4}):totable(), {16 * 5, 16 * 6, 16 * 9, 16 * 10})
  T.raises(function() run("resize(2, method='cubic')", ramp) end, "unknown resize method 'cubic'")
  T.raises(function() run("resize(2, antialias=True, extra=1)", ramp) end,
           "unexpected keyword argument 'extra'")
end)

T.run()
