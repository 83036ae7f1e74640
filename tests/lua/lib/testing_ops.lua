-- pp ops used by bvlua's own tests, not part of the library: a module, so that pipeline workers
-- can `require` it (`requires = {"tests.lua.lib.testing_ops"}`, or from a test config's
-- register_pp_ops).
bv.pp.register("test_noise", function()
  return function(d, rng) d.r = rng:integer(1, 1000000); return d end
end, "test_noise(): stores a random integer from the example's stream in r")
bv.pp.register("test_tiny_cap", function()
  return function(d) d.image = bv.image.decode(d.image, {max_pixels = 10}); return d end
end, "test_tiny_cap(): decodes with a pixel cap of 10, to test the cap's error")
bv.pp.register("test_nan_image", function()
  return function(d) d.image = d.image * (0 / 0); return d end
end, "test_nan_image(): turns the image into NaNs, to test the trainer's NaN guard")
return {}
