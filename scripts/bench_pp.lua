-- The pp benchmark's bvlua side (scripts/bench's pp section runs it next to the peers).
--   bvlua run scripts/bench_pp.lua make DIR [N]          writes N (300) JPEGs of 500x375
--   bvlua run scripts/bench_pp.lua run DIR PP WORKERS    prints "images/s"
-- "run" pushes every file through the input pipeline (bv.data.inference, WORKERS threads, one
-- intra-op thread each) twice and reports the faster pass.
local mode, dir = arg[1], arg[2]
local json = require "bv.json"

if mode == "make" then
  local n = tonumber(arg[3]) or 300
  bv.fs.mkdirs(dir)
  local rng = bv.rng(0)
  local lines = {}
  for i = 1, n do
    -- A smooth colour gradient with some lines and mild noise: photo-like JPEG sizes.
    local h, w = 375, 500
    local ys = bv.arange(0, h):to("float32"):view({h, 1, 1}) / h
    local xs = bv.arange(0, w):to("float32"):view({1, w, 1}) / w
    local base = bv.tensor({rng:uniform(), rng:uniform(), rng:uniform()}):view({1, 1, 3})
    local img = (ys * base + xs * (1 - base)) * 200 + bv.randn({h, w, 3}, rng) * 8 + 20
    img = img:clamp(0, 255):to("uint8"):contiguous()
    for _ = 1, 6 do
      bv.image.draw_line(img, rng:uniform(1, w), rng:uniform(1, h), rng:uniform(1, w),
                         rng:uniform(1, h), {rng:integer(0, 255), rng:integer(0, 255), 0}, 4)
    end
    local name = string.format("img_%04d.jpg", i)
    bv.image.write_jpeg(img, dir .. "/" .. name, 90)
    lines[i] = json.encode({image = name, label = i % 10})
  end
  bv.fs.write_file(dir .. "/files.jsonl", table.concat(lines, "\n") .. "\n")
  print(string.format("wrote %d JPEGs to %s", n, dir))
elseif mode == "run" then
  local pp, workers = arg[3], tonumber(arg[4])
  local cfg = {data = {name = "bv:jsonl", fname = dir .. "/files.jsonl", fopen_keys = {image = dir}},
               pp = pp .. "|keep('image')", batch_size = 32}
  local best = math.huge
  local count
  for _ = 1, 2 do
    local it = bv.data.inference(cfg, {workers = workers})
    local start = bv.clock()
    count = 0
    while true do
      local b = it:next()
      if not b then break end
      count = count + b._mask:sum():item()
    end
    best = math.min(best, bv.clock() - start)
  end
  print(string.format("%.1f", count / best))
else
  error("usage: bvlua run scripts/bench_pp.lua make DIR [N] | run DIR PP WORKERS")
end
