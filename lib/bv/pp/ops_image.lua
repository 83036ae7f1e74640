-- big_vision's image pp ops (pp/ops_image.py), and flip_ud (bvlua's own). Every op reads and
-- writes one key (`image` by default; `key`, `inkey`, `outkey` change it). The pixel work is
-- native (bv.image, in runtime/image/): codec.cpp, resize.cpp, crop.cpp; this file binds
-- arguments and draws coins. RandAugment is in archive/randaug.lua, as in big_vision.
local pp = require "bv.pp"
local as_tensor = require("bv.pp.ops_general").as_tensor

local ikok = pp.inkeyoutkey
local register = pp.register

local function need_rng(rng, op)
  if not rng then error(op .. ": needs a random stream (rng)", 0) end
  return rng
end

register("decode", ikok(function(a)
  local opts = {channels = a.channels, precise = a.precise}
  return function(x)
    if type(x) ~= "string" then error("decode: expected encoded bytes (a string), got a " .. type(x), 0) end
    return bv.image.decode(x, opts)
  end
end), "decode(channels=3, precise=False): decodes JPEG or PNG bytes to a uint8 HxWxC image "
  .. "(precise: the accurate JPEG IDCT instead of TF's fast default)")

register("resize", ikok(function(a)
  local size, method, antialias = a.size, a.method, a.antialias
  return function(x) return bv.image.resize(x, size, method, antialias) end
end), "resize(size, method='bilinear', antialias=False): resizes to size (int or (h, w)) with "
  .. "TF2's semantics, keeping the dtype")

register("resize_small", ikok(function(a)
  local size, method, antialias = a.smaller_size, a.method, a.antialias
  return function(x) return bv.image.resize_small(x, size, method, antialias) end
end), "resize_small(smaller_size, method='area', antialias=False): resizes so the shorter "
  .. "side is smaller_size")

register("resize_long", ikok(function(a)
  local size, method, antialias = a.longer_size, a.method, a.antialias
  return function(x) return bv.image.resize_long(x, size, method, antialias) end
end), "resize_long(longer_size, method='area', antialias=True): resizes so the longer side "
  .. "is longer_size")

register("central_crop", ikok(function(a)
  local size = a.crop_size
  return function(x) return bv.image.central_crop(x, size) end
end), "central_crop(crop_size=None): the centred crop of crop_size (int or (h, w)); the "
  .. "largest square without a size")

register("random_crop", ikok(function(a)
  local size = a.crop_size
  return function(x, rng) return bv.image.random_crop(x, size, need_rng(rng, "random_crop")) end
end), "random_crop(crop_size): a crop of crop_size (int or (h, w)) at a uniform random offset")

register("inception_crop", ikok(function(a)
  local opts = {area_min = a.area_min, area_max = a.area_max}
  local size, method, antialias = a.size, a.method, a.antialias
  return function(x, rng)
    local crop = bv.image.inception_crop(x, need_rng(rng, "inception_crop"), opts)
    if size then crop = bv.image.resize(crop, size, method, antialias) end
    return crop
  end
end), "inception_crop(size=None, area_min=5, area_max=100, method='bilinear', antialias=False): "
  .. "a random crop covering area_min..area_max percent (TF's sampling), then resize(size)")

register("decode_jpeg_and_inception_crop", ikok(function(a)
  local opts = {area_min = a.area_min, area_max = a.area_max, ratio_min = a.ratio_min,
                ratio_max = a.ratio_max}
  local size, method, antialias = a.size, a.method, a.antialias
  return function(bytes, rng)
    if type(bytes) ~= "string" then
      error("decode_jpeg_and_inception_crop: expected encoded bytes (a string), got a " .. type(bytes), 0)
    end
    local info = bv.image.peek(bytes)
    local y, x, h, w = bv.image.sample_inception_box(info.height, info.width,
                                                     need_rng(rng, "decode_jpeg_and_inception_crop"), opts)
    local crop = bv.image.decode_crop(bytes, y, x, h, w, {channels = 3})
    if size then crop = bv.image.resize(crop, size, method, antialias) end
    return crop
  end
end), "decode_jpeg_and_inception_crop(size=None, area_min=5, area_max=100, ratio_min=0.75, "
  .. "ratio_max=1.33, method='bilinear', antialias=False): inception_crop sampled on the JPEG "
  .. "header's shape, decoding only the crop")

register("flip_lr", ikok(function()
  return function(x, rng)
    if need_rng(rng, "flip_lr"):uniform() < 0.5 then return bv.image.flip_lr(x) end
    return x
  end
end), "flip_lr(): flips left-right with probability 0.5")

register("flip_ud", ikok(function()
  return function(x, rng)
    if need_rng(rng, "flip_ud"):uniform() < 0.5 then return bv.image.flip_ud(x) end
    return x
  end
end), "flip_ud(): flips upside down with probability 0.5 (bvlua's own; not in big_vision)")

local VGG_MEAN = {0.485 * 255, 0.456 * 255, 0.406 * 255}
local VGG_STD = {0.229 * 255, 0.224 * 255, 0.225 * 255}

register("vgg_value_range", ikok(function(a)
  local mean, std, key = a.mean or VGG_MEAN, a.std or VGG_STD, a.key or a.inkey
  return function(x) return bv.ops.normalize(as_tensor(x, "vgg_value_range", key), mean, std) end
end), "vgg_value_range(mean=None, std=None): (x - mean) / std with ImageNet's mean and std "
  .. "(times 255) unless given")

local CLIP_MEAN = {0.48145466 * 255, 0.4578275 * 255, 0.40821073 * 255}
local CLIP_STD = {0.26862954 * 255, 0.26130258 * 255, 0.27577711 * 255}

register("clip_value_range", ikok(function(a)
  local key = a.key or a.inkey
  return function(x)
    return bv.ops.normalize(as_tensor(x, "clip_value_range", key), CLIP_MEAN, CLIP_STD)
  end
end), "clip_value_range(): (x - mean) / std with CLIP's mean and std (times 255)")
