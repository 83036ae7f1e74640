-- bv.ckpt training checkpoints and safetensors files from Lua: round trips (tensors, the state
-- table through bv.json, keep), list, retention, the fallback warning, and errors that carry
-- this file's name and line.
local T = require "tests.lua.lib.testing"

local root = os.tmpname()
os.remove(root)
bv.fs.mkdirs(root)
local n_dirs = 0
local function fresh_dir()
  n_dirs = n_dirs + 1
  return root .. "/w" .. n_dirs
end

local function step_tensors(step)
  return {
    ["params/img/head/kernel"] = bv.full({3, 2}, step, "float32"),
    ["params/img/head/bias"] = bv.full({2}, step, "bfloat16"),
    ["opt/count"] = bv.tensor(step),
    ["opt/mask"] = bv.full({4}, step % 2 == 0),
  }
end

local function same_tensors(got, want)
  local n = 0
  for name, t in pairs(want) do
    T.truthy(got[name], "missing tensor " .. name)
    T.eq(got[name]:dtype(), t:dtype(), name)
    T.truthy(got[name] == t, "values of " .. name)
    n = n + 1
  end
  for _ in pairs(got) do n = n - 1 end
  T.eq(n, 0, "number of tensors")
end

T.test("save and load a checkpoint", function()
  local w = fresh_dir()
  T.eq(bv.ckpt.load(w), nil)
  T.eq(bv.ckpt.list(w), {})
  local state = {
    step = 7, lr = 0.03, name = "run/ü", flags = {true, false},
    data = {position = 1234, epoch = 2.5}, rng = {seed = 0, counter = 9007199254740993},
    empty = {},
  }
  T.eq(bv.ckpt.save(w, 7, step_tensors(7), state), {})  -- no warnings: nothing left behind
  local c = bv.ckpt.load(w)
  T.eq(c.step, 7)
  T.eq(c.path, w .. "/ckpt-000000007")
  T.eq(c.warning, nil)
  T.eq(c.keep, false)
  T.eq(c.state, state)
  T.eq(math.type(c.state.rng.counter), "integer")
  T.eq(math.type(c.state.lr), "float")
  same_tensors(c.tensors, step_tensors(7))
  -- Verified the same, no tensor loaded (a resume reads them one at a time: bv.ckpt.open).
  local lean = bv.ckpt.load(w, {tensors = false})
  T.eq(lean.step, 7)
  T.eq(lean.state, state)
  T.eq(lean.tensors, nil)
  T.raises(function() bv.ckpt.load(w, {tensor = false}) end, "unknown option 'tensor'")
  T.raises(function() bv.ckpt.load(w, {tensors = 0}) end, "'tensors' must be a boolean")
  T.eq(bv.fs.read_file(w .. "/LAST"), "ckpt-000000007\n")
  T.eq(bv.ckpt.list(w), {7})
  -- The state is optional.
  bv.ckpt.save(w, 8, {x = bv.ones({1})})
  T.eq(bv.ckpt.load(w).state, {})
end)

T.test("keep marks and retention", function()
  local w = fresh_dir()
  for step = 1, 5 do
    bv.ckpt.save(w, step, step_tensors(step), {step = step}, {keep = step == 2})
  end
  T.eq(bv.ckpt.list(w), {2, 5})
  bv.ckpt.save(w, 6, step_tensors(6), {step = 6}, {keep = false})
  T.eq(bv.ckpt.list(w), {2, 6})
  local c = bv.ckpt.load(w)
  T.eq(c.step, 6)
  T.eq(c.state.step, 6)
end)

T.test("a corrupt newest checkpoint falls back with a warning", function()
  local w = fresh_dir()
  bv.ckpt.save(w, 1, step_tensors(1), {step = 1}, {keep = true})
  bv.ckpt.save(w, 2, step_tensors(2), {step = 2})
  local file = w .. "/ckpt-000000002/tensors.safetensors"
  local bytes = bv.fs.read_file(file)
  local i = #bytes - 2
  bv.fs.write_file(file, bytes:sub(1, i - 1) .. string.char(bytes:byte(i) ~ 1) .. bytes:sub(i + 1))
  local c = bv.ckpt.load(w)
  T.eq(c.step, 1)
  T.truthy(c.warning and c.warning:find("checksum", 1, true), "warning names the checksum")
  same_tensors(c.tensors, step_tensors(1))
  -- Without anything to fall back to, load is an error naming the directory.
  os.execute("rm -rf '" .. w .. "/ckpt-000000001'")
  local msg = T.raises(function() bv.ckpt.load(w) end, "checkpoint_test.lua:")
  T.truthy(msg:find("ckpt-000000002", 1, true), msg)
end)

T.test("argument errors name this file and line", function()
  local w = fresh_dir()
  local msg = T.raises(function() bv.ckpt.save(w, 1, {a = 3}) end, "checkpoint_test.lua:")
  T.truthy(msg:find("tensors['a'] is a number, not a tensor", 1, true), msg)
  msg = T.raises(function() bv.ckpt.save(w, 1, {[1] = bv.ones({1})}) end, "checkpoint_test.lua:")
  T.truthy(msg:find("names must be strings", 1, true), msg)
  msg = T.raises(function() bv.ckpt.save(w, 1, {}, {f = print}) end, "checkpoint_test.lua:")
  T.truthy(msg:find("cannot be stored as JSON", 1, true), msg)
  msg = T.raises(function() bv.ckpt.save(w, 1, {}, {}, {kep = true}) end, "checkpoint_test.lua:")
  T.truthy(msg:find("unknown option 'kep'", 1, true), msg)
  msg = T.raises(function() bv.ckpt.save(w, 1, {}, {}, {keep = 1}) end, "checkpoint_test.lua:")
  T.truthy(msg:find("keep must be a boolean", 1, true), msg)
  msg = T.raises(function() bv.ckpt.save(w, -3, {}) end, "checkpoint_test.lua:")
  T.truthy(msg:find(">= 0", 1, true), msg)
  msg = T.raises(function() bv.ckpt.save(w, 1, {c = bv.zeros({2}):to("float64"), d = 1}) end,
                 "checkpoint_test.lua:")
  T.truthy(msg:find("tensors['d']", 1, true), msg)
  T.eq(bv.ckpt.list(w), {})
end)

T.test("safetensors files", function()
  local path = root .. "/x.safetensors"
  local tensors = {
    a = bv.arange(0, 6):reshape({2, 3}),
    b = bv.randn({4}, bv.rng(1)):to("float16"),
    c = bv.tensor(true),
    e = bv.zeros({0, 3}, "uint8"),
  }
  bv.ckpt.save_safetensors(path, tensors, {format = "pt", version = 2})
  local got, meta = bv.ckpt.load_safetensors(path)
  same_tensors(got, tensors)
  T.eq(meta, {format = "pt", version = "2"})
  local header = bv.ckpt.safetensors_header(path)
  T.eq(header.metadata.format, "pt")
  T.eq(#header.tensors, 4)
  T.eq(header.tensors[1], {name = "a", dtype = "int64", shape = {2, 3}})
  T.eq(header.tensors[4].shape, {0, 3})
  -- Without metadata.
  bv.ckpt.save_safetensors(path, {a = bv.ones({2})})
  local _, none = bv.ckpt.load_safetensors(path)
  T.eq(none, {})

  local msg = T.raises(function() bv.ckpt.save_safetensors(path, tensors, {x = {}}) end,
                       "checkpoint_test.lua:")
  T.truthy(msg:find("metadata['x'] is a table", 1, true), msg)
  -- A corrupt file: the error names this line and the file.
  local bad = root .. "/bad.safetensors"
  local f = assert(io.open(bad, "wb"))
  f:write(string.pack("<I8", 12), '{"a":[1, 2]}')
  f:close()
  msg = T.raises(function() bv.ckpt.load_safetensors(bad) end, "checkpoint_test.lua:")
  T.truthy(msg:find(bad, 1, true), msg)
  T.truthy(msg:find("tensor 'a': entry must be an object", 1, true), msg)
  msg = T.raises(function() bv.ckpt.load_safetensors(root .. "/nope.safetensors") end,
                 "checkpoint_test.lua:")
  T.truthy(msg:find("nope.safetensors", 1, true), msg)
end)

T.run()
os.execute("rm -rf '" .. root .. "'")
