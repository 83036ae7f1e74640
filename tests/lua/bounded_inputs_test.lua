-- Every input bounded (issue 31), as the Lua side sees it: messages quote at most a snippet of
-- what they were given (bv.snippet), JSON-L refuses integers past int64 and NULs in file names,
-- a pp op refuses a boolean where it wants a number, images over input.max_pixels are refused
-- from their header (and skipped and counted with skip_errors), a batch size whose buffers
-- cannot fit in memory fails at once naming its key, and models name the key of a bad dimension.
local T = require "tests.lua.lib.testing"
local config = require "bv.config"
local evaluators = require "bv.evaluators"
local json = require "bv.json"
local literal = require "bv.literal"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local function write(name, bytes)
  local path = tmp .. "/" .. name
  bv.fs.write_file(path, bytes)
  return path
end

local function jsonl(name, lines)
  return {name = "bv:jsonl", fname = write(name, table.concat(lines, "\n") .. "\n"),
          fopen_keys = {image = tmp}}
end

-- A baseline JPEG whose header claims height x width; its data is an 8x8 image's (1.1 KB).
local function jpeg_claiming(height, width)
  local jpeg = bv.image.encode_jpeg(bv.zeros({8, 8, 3}):to("uint8"))
  local sof = jpeg:find("\xFF\xC0", 1, true)
  return jpeg:sub(1, sof + 4) .. string.pack(">I2I2", height, width) .. jpeg:sub(sof + 9)
end

local function crc32(s)
  local crc = 0xFFFFFFFF
  for i = 1, #s do
    crc = crc ~ s:byte(i)
    for _ = 1, 8 do crc = (crc >> 1) ~ (0xEDB88320 & -(crc & 1)) end
  end
  return crc ~ 0xFFFFFFFF
end

-- A PNG whose IHDR claims height x width (with a right CRC); its data is a 4x4 image's.
local function png_claiming(height, width)
  local png = bv.image.encode_png(bv.zeros({4, 4, 3}):to("uint8"))
  local ihdr = "IHDR" .. string.pack(">I4I4", width, height) .. png:sub(25, 29)
  return png:sub(1, 12) .. ihdr .. string.pack(">I4", crc32(ihdr)) .. png:sub(34)
end

local PP = 'decode|resize(8)|value_range(0, 1)|onehot(3, key="label", key_result="labels")'
  .. '|keep("image", "labels")'

T.test("bv.snippet: a few hundred bytes at most, control bytes shown", function()
  T.eq(bv.snippet("x.png"), "x.png")
  T.eq(bv.snippet(("x"):rep(1000000)), ("x"):rep(200) .. "... (1000000 bytes in all)")
  T.eq(bv.snippet("a\0b\n"), "a\\0b\\n")
  T.eq(bv.snippet("abcdef", 2), "ab... (6 bytes in all)")
end)

T.test("a 1 MB bad JSON-L line makes a short error", function()
  local src = jsonl("big.jsonl", {'{"image": "a.png", "label": "' .. ("x"):rep(1000000) .. '}'})
  local msg = T.raises(function() bv.data.source(src) end, "big.jsonl:1: bad JSON: parse error")
  T.truthy(#msg < 600, "the message has " .. #msg .. " bytes")
  T.truthy(msg:find("bytes in all)", 1, true), msg)
end)

T.test("JSON-L: an integer past int64 is a parse error naming the key and line", function()
  local src = jsonl("int.jsonl", {'{"label": 1}', '{"label": 99999999999999999999999999}'})
  T.raises(function() bv.data.source(src) end,
           "int.jsonl:2 key 'label': the integer 99999999999999999999999999 does not fit in int64")
  -- With skip_errors the line is a bad example, skipped and counted like any other.
  local kept = bv.data.source(src, {skip_errors = true})
  T.eq({kept:size(), kept:bad_lines()}, {2, 1})
end)

T.test("JSON-L: a file name with a NUL is refused", function()
  local src = jsonl("nul.jsonl", {'{"image": "x.png\\u0000/../../etc/passwd", "label": 1}'})
  T.raises(function() bv.data.source(src) end,
           "nul.jsonl:1: fopen key 'image' holds a file name with a NUL byte "
           .. "('x.png\\0/../../etc/passwd')")
end)

T.test("JSON-L: a file name past PATH_MAX is refused with a snippet", function()
  local src = jsonl("long.jsonl", {'{"image": "' .. ("a"):rep(100000) .. '", "label": 1}'})
  local msg = T.raises(function() bv.data.source(src) end,
                       "long.jsonl:1: fopen key 'image' holds a file name of 100000 bytes")
  T.truthy(#msg < 600, "the message has " .. #msg .. " bytes")
end)

T.test("pp: a missing key's message quotes a snippet of the example's keys", function()
  local data = {}
  for i = 1, 10000 do data["key" .. i] = i end
  local msg = T.raises(function() bv.pp.build("onehot(3, key='label')")(data) end,
                       "no key 'label' in the example (keys: key1, key10, key100")
  T.truthy(#msg < 600, "the message has " .. #msg .. " bytes")
end)

T.test("pp: a boolean where a number is expected names the key", function()
  write("ok.png", bv.image.encode_png(bv.zeros({8, 8, 3}):to("uint8")))
  local input = {data = jsonl("bool.jsonl", {'{"image": "ok.png", "label": true}'}),
                 pp = PP, batch_size = 1}
  local it = bv.data.training(input, {workers = 1})
  T.raises(function() it:next() end,
           "onehot: key 'label' holds a boolean (true) where a number or tensor is expected")
  it:close()
end)

T.test("input.max_pixels: refused from the header, skipped and counted, configurable", function()
  write("small.png", bv.image.encode_png(bv.zeros({30, 40, 3}):to("uint8")))
  write("huge.jpg", jpeg_claiming(12000, 11000))
  write("huge.png", png_claiming(12000, 11000))
  local rows = {'{"image": "huge.jpg", "label": 0}', '{"image": "small.png", "label": 1}',
                '{"image": "huge.png", "label": 2}'}
  local data = jsonl("caps.jsonl", rows)
  -- The default cap (PIL's) refuses both headers before decoding; skip_errors counts them.
  local it = bv.data.training({data = data, pp = PP, batch_size = 2, skip_errors = true},
                              {workers = 1})
  T.eq(it:next().labels:shape(), {2, 3})
  T.eq(it:skipped() >= 2, true)
  T.truthy(it:last_skipped_error():find("image of 12000x11000 pixels (height x width) exceeds "
    .. "the cap of 89478485 (input.max_pixels)", 1, true), it:last_skipped_error())
  it:close()
  -- A smaller cap refuses the 30x40 image too, naming the key; without skip_errors it fails.
  local small = jsonl("small.jsonl", {rows[2]})
  it = bv.data.training({data = small, pp = PP, batch_size = 1, max_pixels = 1000},
                        {workers = 1})
  T.raises(function() it:next() end, "image of 30x40 pixels (height x width) exceeds the cap of "
           .. "1000 (input.max_pixels)")
  it:close()
  it = bv.data.training({data = small, pp = PP, batch_size = 1, max_pixels = 1200}, {workers = 1})
  T.eq(it:next().labels:shape(), {1, 3})
  it:close()
  T.raises(function() bv.data.training({data = small, pp = PP, batch_size = 1, max_pixels = 0}) end,
           "data: input.max_pixels must be a positive integer (pixels: height * width), got 0")
  -- Evaluators take the training input's cap.
  local evs = evaluators.from_config(
    {input = {batch_size = 1, max_pixels = 1000},
     evals = {val = {type = "classification", data = small, pp = PP, workers = 1,
                     loss_name = "softmax_xent"}}},
    {predict = function(_, batch) return bv.zeros({batch.image:shape()[1], 3}) end})
  T.raises(function() evs[1].evaluator:run(nil) end, "exceeds the cap of 1000 (input.max_pixels)")
  -- bv.image.decode outside a pipeline keeps the codec's own cap and option.
  T.raises(function() bv.image.decode(jpeg_claiming(12000, 12000)) end,
           "exceeds the cap of 134217728 (max_pixels)")
end)

T.test("input.batch_size: a batch that cannot fit in memory fails at once, naming the key",
       function()
  write("ok.png", bv.image.encode_png(bv.zeros({8, 8, 3}):to("uint8")))
  local data = jsonl("one.jsonl", {'{"image": "ok.png", "label": 1}'})
  local start = bv.clock()
  local it = bv.data.training({data = data, pp = PP, batch_size = 1000000000}, {workers = 2})
  local msg = T.raises(function() it:next() end, "data: input.batch_size asks for batches of "
                       .. "1000000000 examples (per process), which cannot fit in memory")
  T.truthy(msg:find("make input.batch_size smaller", 1, true), msg)
  it:close()
  T.truthy(bv.clock() - start < 5, "took " .. (bv.clock() - start) .. " s")
  -- Against a given memory (opts.memory_bytes): 4 batches of 64 examples of about 1 KB.
  it = bv.data.training({data = data, pp = PP, batch_size = 64}, {memory_bytes = 100000})
  T.raises(function() it:next() end, "100.0 KB available")
  it:close()
  it = bv.data.training({data = data, pp = PP, batch_size = 4}, {memory_bytes = 100000})
  T.eq(it:next().image:shape(), {4, 8, 8, 3})
  it:close()
  -- An evaluator's batch size too.
  local evs = evaluators.from_config(
    {input = {batch_size = 1}, batch_size_eval = 1000000000,
     evals = {val = {type = "classification", data = data, pp = PP, workers = 1,
                     loss_name = "softmax_xent"}}},
    {predict = function() error("never called") end})
  T.raises(function() evs[1].evaluator:run(nil) end, "data: classification's batch_size "
           .. "(evals.NAME.batch_size, else batch_size_eval, else input.batch_size) asks for "
           .. "batches of 1000000000 examples")
end)

T.test("pp strings, literals, overrides and JSON quote a snippet", function()
  local huge = ("y"):rep(1000000)
  local msg = T.raises(function() bv.pp.build("decode|" .. huge .. "(") end, "pp: ")
  T.truthy(#msg < 1000, "pp: " .. #msg .. " bytes")
  msg = T.raises(function() literal.parse("[1, " .. huge) end, "literal: ")
  T.truthy(#msg < 600, "literal: " .. #msg .. " bytes")
  msg = T.raises(function()
    config.override({input = {batch_size = 1}}, "input.batch_size", huge)
  end, "--config.input.batch_size: expected an integer")
  T.truthy(#msg < 600, "override: " .. #msg .. " bytes")
  -- (and "did you mean" compares no candidate far longer or shorter than the key: 13 s before)
  local start = bv.clock()
  msg = T.raises(function() config.override({input = {}}, "input." .. huge, "1") end,
                 "unknown config key")
  T.truthy(#msg < 1000, "override key: " .. #msg .. " bytes")
  T.truthy(bv.clock() - start < 2, "override key: " .. (bv.clock() - start) .. " s")
  msg = T.raises(function() json.decode("[" .. huge .. "]") end, "json: unexpected")
  T.truthy(#msg < 600, "json: " .. #msg .. " bytes")
end)

T.test("models name the config key of a bad dimension", function()
  T.raises(function() bv.models.build("vit", {variant = "mu/0"}) end,
           "vit: model.variant 'mu/0': the patch size must be positive")
  T.raises(function() bv.models.build("vit", {variant = "mu/8", image_size = 6}) end,
           "is smaller than one 8x8 patch (model.variant 'mu/8')")
  T.raises(function() bv.models.build("proj.paligemma.paligemma", {img = {variant = "mu/0"}}) end,
           "vit: model.img.variant 'mu/0'")
end)

T.run()
