-- big_vision's RandAugment op (pp/archive/randaug.py). The augmentations are native
-- (bv.image.randaug, runtime/image/randaug.cpp); this file binds arguments.
local pp = require "bv.pp"

pp.register("randaug", pp.inkeyoutkey(function(a)
  local layers, magnitude, fix = a.num_layers, a.magnitude, a.fix_contrast
  return function(x, rng)
    if not rng then error("randaug: needs a random stream (rng)", 0) end
    return bv.image.randaug(x, layers, magnitude, rng, fix)
  end
end), "randaug(num_layers=2, magnitude=10, fix_contrast=False): big_vision's RandAugment on a "
  .. "uint8 image; fix_contrast blends Contrast with the real mean (big_vision issue #109)")
