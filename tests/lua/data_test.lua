-- bv.data: sources, the threaded pipeline's determinism and resume, inference padding,
-- mixtures, sharding and the failure modes (bad JSON, missing files, pp errors, skip_errors).
local T = require "tests.lua.lib.testing"
local json = require "bv.json"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

-- Writes `rows` (Lua tables) as a JSON-L file and returns its path.
local function write_jsonl(name, rows, extra_lines)
  local lines = {}
  for i, r in ipairs(rows) do lines[i] = json.encode(r) end
  for _, l in ipairs(extra_lines or {}) do lines[#lines + 1] = l end
  local path = tmp .. "/" .. name
  bv.fs.write_file(path, table.concat(lines, "\n") .. "\n")
  return path
end

local rows = {}
for i = 0, 19 do rows[#rows + 1] = {x = i, txt = "ex" .. i, v = {i, i + 1}} end
local fname = write_jsonl("d.jsonl", rows)
local data_cfg = {name = "bv:jsonl", fname = fname}

local function take(it, n)
  local out = {}
  for i = 1, n do
    local b = it:next()
    out[i] = {x = b.x:totable(), r = b.r and b.r:totable(), txt = b.txt}
  end
  return out
end

T.test("jsonl source: ids, fields, start/stop, lists as tensors", function()
  local src = bv.data.source(data_cfg)
  T.eq(src:size(), 20)
  local ex = src:example(3)
  T.eq(ex.id, "2"); T.eq(ex.x, 2); T.eq(ex.txt, "ex2"); T.eq(ex.v:totable(), {2, 3})
  T.eq(src:origin(3), fname .. ":3")
  local part = bv.data.source({name = "bv:jsonl", fname = fname, start = 5, stop = 8})
  T.eq(part:size(), 3)
  T.eq(part:example(1).x, 5)
  T.eq(part:example(1).id, "0")  -- the index among kept examples, as big_vision
  local own = bv.data.source({name = "bv:jsonl", fname = write_jsonl("id.jsonl", {{id = "a7", x = 1}})})
  T.eq(own:example(1).id, "a7")
end)

T.test("the batch sequence does not depend on the number of workers", function()
  local input = {data = data_cfg, batch_size = 4, shuffle_buffer_size = 7,
                 pp = "choice(n=1, key=['v'])|lower(key='txt')"}
  local a = take(bv.data.training(input, {seed = 3, workers = 1}), 12)
  local b = take(bv.data.training(input, {seed = 3, workers = 2}), 12)
  local c = take(bv.data.training(input, {seed = 3, workers = 4}), 12)
  T.eq(a, b); T.eq(a, c)
  local d = take(bv.data.training(input, {seed = 4, workers = 2}), 12)
  T.truthy(not T.deep_eq(a, d), "another seed, another order")
end)

T.test("a negative position is refused, naming it", function()
  T.raises(function()
    bv.data.training({data = data_cfg, batch_size = 5}, {seed = 0, position = -5})
  end, "position must be 0 or more (examples already read), got -5")
end)

T.test("every epoch visits each example once (shuffle then repeat)", function()
  local it = bv.data.training({data = data_cfg, batch_size = 5, shuffle_buffer_size = 6},
                              {seed = 0, workers = 2})
  for _ = 1, 3 do
    local seen = {}
    for _ = 1, 4 do
      for _, x in ipairs(it:next().x:totable()) do seen[#seen + 1] = x end
    end
    table.sort(seen)
    local want = {}
    for i = 0, 19 do want[#want + 1] = i end
    T.eq(seen, want)
  end
end)

T.test("a saved position resumes with exactly the same examples and randomness", function()
  local input = {data = data_cfg, batch_size = 3, shuffle_buffer_size = 5, pp = "test_noise"}
  -- test_noise lives in a module that the workers require
  local opts = {seed = 9, workers = 2, requires = {"tests.lua.lib.testing_ops"}}
  local full = take(bv.data.training(input, opts), 10)
  local it = bv.data.training(input, opts)
  take(it, 4)
  local pos = it:position()
  T.eq(pos, 12)
  local resumed = take(bv.data.training(input, {seed = 9, workers = 3, position = pos,
                                                requires = {"tests.lua.lib.testing_ops"}}), 6)
  for i = 1, 6 do T.eq(resumed[i], full[4 + i]) end
end)

T.device_test("pin_memory: batches for a device are stacked in pinned host memory, and copy there",
              function(device)
  local plain = bv.data.training({data = data_cfg, batch_size = 4}, {seed = 1}):next()
  local it = bv.data.training({data = data_cfg, batch_size = 4}, {seed = 1, pin_memory = true})
  local b = it:next()
  T.truthy(b.x:is_pinned() and b.v:is_pinned(), "pinned")
  T.truthy(not plain.x:is_pinned(), "not pinned unless asked")
  T.eq(b.x:totable(), plain.x:totable())
  T.eq(b.txt, plain.txt)
  local on_device = bv.to_device_async(b, device):wait()
  T.eq(on_device.x:device(), device)
  T.eq(on_device.x:to("cpu"):totable(), plain.x:totable())
  T.eq(on_device.txt, plain.txt)  -- strings ride along
end)

T.device_test("prefetch_to: host batches as before; on_device gives their device copies",
              function(device)
  local plain = bv.data.inference({data = data_cfg, batch_size = 8})
  local it <close> = bv.data.prefetch_to(
    bv.data.inference({data = data_cfg, batch_size = 8}, {pin_memory = true}), device)
  local n = 0
  while true do
    local want, got = plain:next(), it:next()
    T.eq(got == nil, want == nil)
    if not got then break end
    n = n + 1
    T.eq(got.x:device(), "cpu")  -- the evaluator reads labels on the host
    T.eq(got.x:totable(), want.x:totable())
    got._mask = nil  -- as an evaluator takes its labels off before predicting
    local on = bv.data.on_device(got, device)
    T.eq(on.x:device(), device)
    T.eq(on.x:to("cpu"):totable(), want.x:totable())
    T.eq(on._mask, nil)
    T.eq(on.txt, want.txt)
    T.truthy(rawequal(bv.data.on_device(got, device).x, on.x), "the same copy, not another")
  end
  T.eq(n, 3)  -- 20 examples in batches of 8, the last one padded
end)

T.test("ops a config registers inline exist in the workers", function()
  local count = tmp .. "/get_config_calls"
  local spec = "tests/lua/fixtures/cfg_inline_op.lua:count=" .. count
  local cfg = bv.config.load(spec)
  -- Loading the config registers nothing here (configs are data)...
  T.raises(function() bv.pp.build("add_ten") end, "unknown op 'add_ten'")
  cfg.input.data = data_cfg
  local it = bv.data.training(cfg.input, {config = spec, workers = 2})
  for _, x in ipairs(it:next().x:totable()) do T.truthy(x >= 10, "add_ten ran") end
  -- ...and the workers ran the config's register_pp_ops, never its get_config: the one call is
  -- the load above.
  local calls = 0
  for _ in io.lines(count) do calls = calls + 1 end
  T.eq(calls, 1, "get_config calls")
  T.raises(function()
    bv.data.training(cfg.input, {workers = 1}):next()
  end, "unknown op 'add_ten'")
end)

T.test("inference: every example once, in order, last batch padded with _mask", function()
  local it, n = bv.data.inference({data = data_cfg, batch_size = 8}, {workers = 2})
  T.eq(n, 20)
  local xs, masks = {}, {}
  while true do
    local b = it:next()
    if not b then break end
    for i, x in ipairs(b.x:totable()) do
      xs[#xs + 1] = x
      masks[#masks + 1] = b._mask[i]:item()
    end
    T.eq(b.txt[8] ~= nil, true)
  end
  T.eq(#xs, 24)
  for i = 1, 20 do T.eq(xs[i], i - 1); T.eq(masks[i], true) end
  for i = 21, 24 do T.eq(xs[i], 0); T.eq(masks[i], false) end
end)

T.test("per-process shards split the examples like np.array_split", function()
  local seen = {}
  for rank = 0, 2 do
    local it = bv.data.inference({data = data_cfg, batch_size = 3}, {rank = rank, world = 3})
    local b = it:next()
    seen[rank + 1] = b.x[1]:item()
  end
  T.eq(seen, {0, 7, 14})  -- parts of 7, 7, 6
  T.raises(function()
    bv.data.training({data = data_cfg, batch_size = 5}, {world = 2})
  end, "not divisible by 2 processes")
end)

T.test("mixtures follow the weights; zero weight is left out", function()
  local other = write_jsonl("o.jsonl", {{x = 100}, {x = 101}, {x = 102}})
  local input = {data = {a = 0.75, b = 0.25, c = 0}, batch_size = 20,
                 a = {data = data_cfg, pp = "keep('x')", shuffle_buffer_size = 4},
                 b = {data = {name = "bv:jsonl", fname = other}, pp = "keep('x')"},
                 c = {data = {name = "bv:jsonl", fname = "/nonexistent.jsonl"}}}
  local it, total = bv.data.training(input, {seed = 1, workers = 2})
  T.eq(total, 23)
  local from_b = 0
  for _ = 1, 20 do
    for _, x in ipairs(it:next().x:totable()) do
      if x >= 100 then from_b = from_b + 1 end
    end
  end
  T.truthy(from_b > 60 and from_b < 140, "about a quarter of 400 from b, got " .. from_b)
  input.shuffle_buffer_size = 10
  T.raises(function() bv.data.training(input) end, "input.shuffle_buffer_size belongs to each dataset")
end)

T.test("failure modes name the file and line", function()
  local bad = write_jsonl("bad.jsonl", {{x = 1}}, {"{not json"})
  T.raises(function() bv.data.source({name = "bv:jsonl", fname = bad}) end, "bad.jsonl:2: bad JSON")
  T.raises(function() bv.data.source({name = "bv:jsonl", fname = tmp .. "/none.jsonl"}) end,
           "bv:jsonl: no such file '" .. tmp .. "/none.jsonl' (fname)")
  T.raises(function() bv.data.source({name = "bv:nope"}) end, "unknown source 'bv:nope'")
  local url = write_jsonl("url.jsonl", {{image = "http://x.org/a.jpg"}})
  T.raises(function()
    bv.data.source({name = "bv:jsonl", fname = url, fopen_keys = {"image"}, download_keys = {"image"}})
  end, "bvlua downloads nothing")
  local files = write_jsonl("files.jsonl", {{image = "a.bin"}, {image = "missing.bin"}})
  bv.fs.write_file(tmp .. "/a.bin", "bytes")
  local src_cfg = {name = "bv:jsonl", fname = files, fopen_keys = {image = tmp}}
  T.eq(bv.data.source(src_cfg):example(1).image, "bytes")
  local it = bv.data.inference({data = src_cfg, batch_size = 2}, {workers = 1})
  local msg = T.raises(function() it:next() end, "files.jsonl:2 (image: " .. tmp .. "/missing.bin)")
  T.truthy(msg:find("cannot open", 1, true), msg)
  local op_err = bv.data.inference({data = data_cfg, batch_size = 2, pp = "onehot(3, key='nokey')"})
  T.raises(function() op_err:next() end, "d.jsonl:1: ")
  local shapes = write_jsonl("shapes.jsonl", {{v = {1, 2}}, {v = {1, 2, 3}}})
  T.raises(function()
    bv.data.inference({data = {name = "bv:jsonl", fname = shapes}, batch_size = 2}):next()
  end, "key 'v' has shape [2] in the first example but [3] in example 2")
end)

T.test("bad JSON-L values name the file, the line and the key", function()
  local deep = string.rep("[", 60000) .. string.rep("]", 60000)
  local f = write_jsonl("deep.jsonl", {{x = 1}}, {'{"v": ' .. deep .. '}'})
  T.raises(function() bv.data.source({name = "bv:jsonl", fname = f}) end,
           "deep.jsonl:2: bad JSON: nested deeper than 256 levels at byte 262")
  f = write_jsonl("huge.jsonl", {{x = 1}}, {'{"x": 1e400}'})
  T.raises(function() bv.data.source({name = "bv:jsonl", fname = f}) end,
           "huge.jsonl:2: bad JSON: number overflow parsing '1e400'")
  f = write_jsonl("wide.jsonl", {}, {'{"n": 18446744073709551615}'})
  T.raises(function() bv.data.source({name = "bv:jsonl", fname = f}) end,
           "wide.jsonl:1 key 'n': the integer 18446744073709551615 does not fit in int64")
  f = write_jsonl("wide2.jsonl", {}, {'{"n": [1, 18446744073709551615]}'})
  T.raises(function() bv.data.source({name = "bv:jsonl", fname = f}) end,
           "wide2.jsonl:1 key 'n': the integer at [1] does not fit in int64")
  f = write_jsonl("wide3.jsonl", {}, {'{"n": [1.5, 18446744073709551615]}'})
  T.eq(bv.data.source({name = "bv:jsonl", fname = f}):example(1).n:dtype(), "float32")
  -- integers past 2^53 stay exact (not through a double)
  f = write_jsonl("exact.jsonl", {}, {'{"n": [9007199254740993, 1]}'})
  T.eq(bv.data.source({name = "bv:jsonl", fname = f}):example(1).n:totable()[1], 9007199254740993)
  local ragged = {
    {'{"v": [1, [2]]}', "the element at [1] is a list where the other elements at that depth are numbers"},
    {'{"v": [[1], 2]}', "the element at [1] is a number where the other elements at that depth are lists"},
    {'{"v": [[1], [2, 3]]}', "the list at [1] has 2 elements where the first list at that depth has 1"},
    {'{"v": [[[1], [2]], [[3], 4]]}', "the element at [1][1] is a number where"},
    {'{"v": [[1, 2], [3, [4]]]}', "the element at [1][1] is a list where"},
    {'{"v": [[], 1]}', "the element at [1] is a number where"},
  }
  for i, case in ipairs(ragged) do
    f = write_jsonl("ragged" .. i .. ".jsonl", {{v = {1}}}, {case[1]})
    T.raises(function() bv.data.source({name = "bv:jsonl", fname = f}) end,
             "ragged" .. i .. ".jsonl:2 key 'v': ragged nested list: " .. case[2])
  end
  f = write_jsonl("rect.jsonl", {}, {'{"v": [[1, 2], [3, 4], [5, 6]], "e": [[], []]}'})
  local ex = bv.data.source({name = "bv:jsonl", fname = f}):example(1)
  T.eq(ex.v:shape(), {3, 2}); T.eq(ex.e:shape(), {2, 0})
end)

T.test("a directory given as a file is named as one", function()
  bv.fs.mkdirs(tmp .. "/adir")
  local f = write_jsonl("dir.jsonl", {{image = "adir"}})
  local cfg = {data = {name = "bv:jsonl", fname = f, fopen_keys = {image = tmp}}, batch_size = 1,
               pp = "decode"}
  local msg = T.raises(function() bv.data.inference(cfg, {workers = 1}):next() end,
                       "dir.jsonl:1 (image: " .. tmp .. "/adir)")
  T.truthy(msg:find("'" .. tmp .. "/adir' is a directory, not a file", 1, true), msg)
  T.raises(function() bv.data.source(cfg.data):example(1) end, "is a directory, not a file")
  -- Every reader of files says so, not "empty image data (0 bytes)".
  T.raises(function() bv.image.read(tmp .. "/adir") end, "'" .. tmp .. "/adir' is a directory")
  T.raises(function() bv.fs.read_file(tmp .. "/adir") end, "is a directory, not a file")
end)

T.test("skip_errors skips bad JSON-L lines and counts them per source", function()
  local lines = {}
  for i = 1, 12 do
    if i % 4 == 0 then
      lines[i] = ({"{not json", '{"x": 1e400}', '{"x": [1, [2]]}'})[i // 4]
    else
      lines[i] = json.encode({x = i})
    end
  end
  local f = write_jsonl("badlines.jsonl", {}, lines)
  T.raises(function() bv.data.source({name = "bv:jsonl", fname = f}) end, "badlines.jsonl:4: bad JSON")
  local src = bv.data.source({name = "bv:jsonl", fname = f}, {skip_errors = true})
  T.eq(src:size(), 12); T.eq(src:bad_lines(), 3)
  T.eq(src:example(5).id, "4")  -- ids stay the index among the lines
  T.raises(function() src:example(4) end, "badlines.jsonl:4: bad JSON")
  local input = {data = {name = "bv:jsonl", fname = f}, batch_size = 9, skip_errors = true}
  local it = bv.data.training(input, {workers = 2})
  local b = it:next()
  local xs = b.x:totable()
  table.sort(xs)
  T.eq(xs, {1, 2, 3, 5, 6, 7, 9, 10, 11})  -- the first epoch: every good line once
  T.eq(it:skipped(), it:position() - 9)  -- every item taken that is not in the batch
  it:next()
  T.eq(it:skipped(), it:position() - 18)
  T.truthy(it:skipped() >= 3, "the first epoch's 3 bad lines, got " .. it:skipped())
  T.eq(it:skipped_by_source(), {[f] = it:skipped()})
  T.truthy(it:last_skipped_error():find("badlines.jsonl:", 1, true), it:last_skipped_error())
  -- a mixture counts per dataset name
  local good = write_jsonl("goodlines.jsonl", {{x = 1}, {x = 2}})
  local mix = {data = {a = 1, b = 1}, batch_size = 8,
               a = {data = {name = "bv:jsonl", fname = f}, skip_errors = true},
               b = {data = {name = "bv:jsonl", fname = good}, skip_errors = true}}
  local mit = bv.data.training(mix, {workers = 1})
  for _ = 1, 5 do mit:next() end
  local per = mit:skipped_by_source()
  T.eq(per.b, 0)
  T.truthy(per.a > 0 and per.a == mit:skipped(), T.dump(per))
  -- a run of bad lines still stops at max_consecutive_errors
  local bad = {}
  for i = 1, 30 do bad[i] = "{" end
  local all_bad = write_jsonl("allbadlines.jsonl", {}, bad)
  local it2 = bv.data.training({data = {name = "bv:jsonl", fname = all_bad}, batch_size = 2,
                                skip_errors = true}, {workers = 1})
  T.raises(function() it2:next() end, "more than 20 examples in a row failed")
end)

T.test("skip_errors skips and counts failing examples, and stops after a run of them", function()
  local mixed = {}
  for i = 1, 12 do mixed[i] = {image = (i % 3 == 0) and "missing.bin" or "a.bin"} end
  local f = write_jsonl("mixed.jsonl", mixed)
  local input = {data = {name = "bv:jsonl", fname = f, fopen_keys = {image = tmp}}, batch_size = 4,
                 skip_errors = true}
  local it = bv.data.training(input, {workers = 2})
  for _ = 1, 3 do T.eq(#it:next().image, 4) end
  T.truthy(it:skipped() >= 4, "skipped " .. it:skipped())
  local all_bad = write_jsonl("allbad.jsonl", {{image = "missing.bin"}})
  local it2 = bv.data.training({data = {name = "bv:jsonl", fname = all_bad, fopen_keys = {image = tmp}},
                                batch_size = 2, skip_errors = true}, {workers = 1})
  T.raises(function() it2:next() end, "more than 20 examples in a row failed")
end)

T.test("images: decode errors and the pixel cap name the JSON line and the file", function()
  bv.image.write_png(bv.zeros({4, 6, 3}, "uint8"), tmp .. "/ok.png")
  bv.fs.write_file(tmp .. "/corrupt.png", "\x89PNG\r\n\x1a\nnot really")
  local f = write_jsonl("imgs.jsonl", {{image = "ok.png"}, {image = "corrupt.png"}})
  local cfg = {data = {name = "bv:jsonl", fname = f, fopen_keys = {image = tmp}}, batch_size = 2,
               pp = "decode"}
  T.raises(function() bv.data.inference(cfg):next() end, "imgs.jsonl:2 (image: " .. tmp .. "/corrupt.png)")
  local f2 = write_jsonl("one.jsonl", {{image = "ok.png"}})
  cfg = {data = {name = "bv:jsonl", fname = f2, fopen_keys = {image = tmp}}, batch_size = 1}
  cfg.pp = "decode"
  T.eq(bv.data.inference(cfg):next().image:shape(), {1, 4, 6, 3})
  bv.pp.register("test_tiny_cap", function() return function(d) d.image = bv.image.decode(d.image, {max_pixels = 10}); return d end end,
                 "test_tiny_cap()")
  cfg.pp = "test_tiny_cap"
  T.raises(function() bv.data.inference(cfg, {requires = {"tests.lua.lib.testing_ops"}}):next() end,
           "one.jsonl:1 (image: " .. tmp .. "/ok.png)")
end)

T.test("cache_raw keeps file bytes in memory after the first read", function()
  -- One file named by 40 rows: after the first batch the file is deleted, and only the cache
  -- can serve the later rows (the workers run at most batch + 1 items ahead with prefetch 0).
  local rows40 = {}
  for i = 1, 40 do rows40[i] = {image = "c.bin"} end
  local f = write_jsonl("cache.jsonl", rows40)
  local function run(cache_raw)
    bv.fs.write_file(tmp .. "/c.bin", "bytes")
    local input = {data = {name = "bv:jsonl", fname = f, fopen_keys = {image = tmp}},
                   batch_size = 4, prefetch = 0, cache_raw = cache_raw}
    local it = bv.data.training(input, {workers = 1})
    T.eq(it:next().image, {"bytes", "bytes", "bytes", "bytes"})
    os.remove(tmp .. "/c.bin")
    for _ = 1, 9 do T.eq(it:next().image[4], "bytes") end
  end
  run(true)
  T.raises(function() run(false) end, "c.bin")
end)

T.test("imagefolder: labels by sorted class name", function()
  local root = tmp .. "/folder"
  for _, f in ipairs({"dog/b.jpg", "dog/a.png", "cat/z.JPG", "cat/notes.txt"}) do
    bv.fs.mkdirs(root .. "/" .. f:match("^(.*)/"))
    bv.fs.write_file(root .. "/" .. f, "x")
  end
  local src = bv.data.source({name = "bv:imagefolder", root = root})
  T.eq(src:class_names(), {"cat", "dog"})
  T.eq(src:size(), 3)
  T.eq(src:example(1).label, 0); T.eq(src:example(1).id, "cat/z.JPG")
  T.eq(src:example(2).label, 1); T.eq(src:example(2).id, "dog/a.png")
  T.raises(function() bv.data.source({name = "bv:imagefolder", root = tmp .. "/nope"}) end,
           "no such directory '" .. tmp .. "/nope' (root)")
  bv.fs.write_file(tmp .. "/afile", "x")
  T.raises(function() bv.data.source({name = "bv:imagefolder", root = tmp .. "/afile"}) end,
           "is not a directory")
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
