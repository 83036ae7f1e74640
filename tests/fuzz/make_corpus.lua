-- The seeds bvlua's own writers make (run by tests/fuzz/make_corpus.py, which makes the rest):
--   build/bvlua run tests/fuzz/make_corpus.lua tests/fuzz/corpus
-- image/: JPEGs and PNGs from bv.image's encoders, each behind the 4 option bytes image_fuzz
--         reads (channels, window); checkpoint/: manifests of the checkpoint checkpoint_fuzz
--         saves (same tensors, step 7, so they record its tensors file's size and CRC-32).
local out = assert(arg[1], "usage: make_corpus.lua CORPUS_DIR")

local function write(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- 4 option bytes: channels (byte % 5) and the precise IDCT (bit 3); the crop window y, x, size.
local function opts(channels, precise, y, x, hw)
  return string.char(channels + (precise and 8 or 0), y, x, hw - 1)
end

local rgb = bv.arange(0, 6 * 5 * 3):reshape({6, 5, 3}):mul(2):to("uint8")
local grey = rgb:select(3, 1)
local rgba = bv.cat({rgb, rgb:narrow(3, 1, 1)}, 3)
local ga = bv.cat({grey:unsqueeze(3), grey:unsqueeze(3)}, 3)
local img = out .. "/image/"
write(img .. "rgb.jpg", opts(3, false, 1, 1, 3) .. bv.image.encode_jpeg(rgb, 90))
write(img .. "grey.jpg", opts(0, true, 0, 0, 4) .. bv.image.encode_jpeg(grey, 50))
write(img .. "rgb_q5.jpg", opts(1, false, 2, 1, 2) .. bv.image.encode_jpeg(rgb, 5))
write(img .. "rgb.png", opts(3, false, 0, 1, 4) .. bv.image.encode_png(rgb))
write(img .. "rgba.png", opts(4, false, 1, 0, 2) .. bv.image.encode_png(rgba, 9))
write(img .. "grey.png", opts(0, false, 2, 2, 3) .. bv.image.encode_png(grey, 0))
write(img .. "grey_alpha.png", opts(2, false, 0, 0, 5) .. bv.image.encode_png(ga))

local tmp = os.tmpname()
os.remove(tmp)
local ok, err = pcall(function()
  bv.ckpt.save(tmp, 7, {["opt/count"] = bv.tensor(7),
                        ["params/w"] = bv.arange(0, 6):to("float32"):reshape({2, 3})},
               {step = 7, data = {pos = 3, seed = 0}, rng = {1, 2}})
  local manifest = read(tmp .. "/ckpt-000000007/manifest.json")
  local ck = out .. "/checkpoint/"
  write(ck .. "manifest.json", manifest)
  write(ck .. "manifest_keep.json", (manifest:gsub('"keep": false', '"keep": true')))
  write(ck .. "manifest_no_state.json", (manifest:gsub(',%s*"state":%s*%b{}', "")))
end)
os.execute("rm -rf '" .. tmp .. "'")
assert(ok, err)
