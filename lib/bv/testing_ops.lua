-- pp ops used by bvlua's own tests (a module, so pipeline workers can `require` it).
bv.pp.register("test_noise", function()
  return function(d, rng) d.r = rng:integer(1, 1000000); return d end
end, "test_noise(): stores a random integer from the example's stream in r")
return {}
