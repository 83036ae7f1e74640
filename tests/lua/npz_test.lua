-- bv.ckpt npz functions, with numpy as the other side: numpy writes (np.savez and
-- np.savez_compressed) and bvlua reads; bvlua writes, numpy reads and re-saves with np.savez, and
-- the two files must be the same bytes. np.savez's zip records carry zipfile's fixed
-- 1980-01-01 00:00 timestamp (ZipInfo's default; nothing takes the clock), so the whole file is
-- deterministic and compared in full.
--
-- numpy comes from the venv scripts/setup makes (T.python).
local T = require "tests.lua.lib.testing"

local PY = T.python("numpy")

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local function run_python(code, ...)
  local script = tmp .. "/script.py"
  bv.fs.write_file(script, code)
  local args = {}
  for i, a in ipairs({...}) do args[i] = "'" .. a .. "'" end
  local ok, how, status = os.execute(PY .. " " .. script .. " " .. table.concat(args, " "))
  if not ok then
    error(string.format("%s %s failed (%s %s)", PY, script, tostring(how), tostring(status)), 2)
  end
end

-- The arrays numpy writes; the checks below know their exact values.
local NUMPY_WRITES = [==[
import sys
import numpy as np
f32 = np.array([1.0, -2.5, 3.140625], dtype='<f4')
bf16 = (f32.view('<u4') >> 16).astype('<u2').view(np.dtype('V2'))  # big_vision's bf16 on disk
arrays = {
    'params/img/head/kernel': (np.arange(6, dtype='<f4').reshape(2, 3) * 0.5 - 1),
    'params/img/head/bias': bf16,
    'params/txt/ids': np.array([-7, 0, 2147483647], dtype='<i4'),
    'pixels': np.array([[0, 255], [17, 3]], dtype='|u1'),
    'mask': np.array([True, False, True]),
    't': np.array(2.5, dtype='<f4'),
    'step': np.array(1234567890123, dtype='<i8'),
    'empty': np.zeros((0, 4), dtype='<f4'),
}
np.savez(sys.argv[1], **arrays)
np.savez_compressed(sys.argv[2], **arrays)
]==]

local function check_numpy_arrays(p, how)
  T.eq(p["params/img/head/kernel"]:dtype(), "float32", how)
  T.eq(p["params/img/head/kernel"]:totable(), {{-1, -0.5, 0}, {0.5, 1, 1.5}}, how)
  T.eq(p["params/img/head/bias"]:dtype(), "bfloat16", how)
  T.eq(p["params/img/head/bias"]:to("float32"):totable(), {1.0, -2.5, 3.140625}, how)
  T.eq(p["params/txt/ids"]:dtype(), "int32", how)
  T.eq(p["params/txt/ids"]:totable(), {-7, 0, 2147483647}, how)
  T.eq(p["pixels"]:dtype(), "uint8", how)
  T.eq(p["pixels"]:totable(), {{0, 255}, {17, 3}}, how)
  T.eq(p["mask"]:dtype(), "bool", how)
  T.eq(p["mask"]:totable(), {true, false, true}, how)
  T.eq(p["t"]:dim(), 0, how)
  T.eq(p["t"]:item(), 2.5, how)
  T.eq(p["step"]:item(), 1234567890123, how)
  T.eq(p["empty"]:shape(), {0, 4}, how)
  local n = 0
  for _ in pairs(p) do n = n + 1 end
  T.eq(n, 8, how .. ": number of arrays")
end

T.test("numpy np.savez and np.savez_compressed files load", function()
  local plain, packed = tmp .. "/numpy.npz", tmp .. "/numpy_compressed.npz"
  run_python(NUMPY_WRITES, plain, packed)
  check_numpy_arrays(bv.ckpt.load_npz(plain), "np.savez")
  check_numpy_arrays(bv.ckpt.load_npz(packed), "np.savez_compressed")
end)

T.test("npz_index lists names, shapes, dtypes and sizes sorted by name", function()
  local plain, packed = tmp .. "/numpy.npz", tmp .. "/numpy_compressed.npz"
  run_python(NUMPY_WRITES, plain, packed)
  for _, path in ipairs({plain, packed}) do
    local index = bv.ckpt.npz_index(path)
    local names = {}
    for i, e in ipairs(index) do names[i] = e.name end
    T.eq(names, {"empty", "mask", "params/img/head/bias", "params/img/head/kernel",
                 "params/txt/ids", "pixels", "step", "t"})
    T.eq(index[3].shape, {3})
    T.eq(index[3].dtype, "bfloat16")
    T.eq(index[3].descr, "|V2")
    T.eq(index[3].bytes, 6)
    T.eq(index[4].shape, {2, 3})
    T.eq(index[4].dtype, "float32")
    T.eq(index[4].bytes, 24)
    T.eq(index[8].shape, {})
    T.eq(index[1].bytes, 0)
    T.eq(index[1].deflated, path == packed)
  end
end)

T.test("load_npz filters by Lua pattern or function", function()
  local plain = tmp .. "/numpy.npz"
  run_python(NUMPY_WRITES, plain, tmp .. "/unused.npz")
  local img = bv.ckpt.load_npz(plain, "^params/img/")
  T.eq(img["params/img/head/kernel"]:shape(), {2, 3})
  T.truthy(img["params/img/head/bias"])
  T.eq(img["params/txt/ids"], nil)
  T.eq(img["pixels"], nil)
  local seen = {}
  local some = bv.ckpt.load_npz(plain, function(name)
    seen[#seen + 1] = name
    return name == "t" or name == "step"
  end)
  T.eq(some.t:item(), 2.5)
  T.eq(some.step:item(), 1234567890123)
  T.eq(some.mask, nil)
  T.eq(#seen, 8)
  T.raises(function() bv.ckpt.load_npz(plain, 42) end, "a Lua pattern (string) or a function")
  T.raises(function() bv.ckpt.load_npz(plain, function() error("filter says no") end) end,
           "filter says no")
end)

-- bvlua writes; numpy checks every value, then re-saves what it loaded with np.savez.
local NUMPY_CHECKS = [==[
import sys
import numpy as np
ours, resaved = sys.argv[1], sys.argv[2]
d = np.load(ours, allow_pickle=False)
f32 = np.array([1.0, -2.5, 3.140625], dtype='<f4')
want = {
    'Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel':
        np.arange(6, dtype='<f4').reshape(2, 3) * 0.5 - 1,
    'bf16': (f32.view('<u4') >> 16).astype('<u2').view(np.dtype('V2')),
    'f64': np.array([0.1, -1e300], dtype='<f8'),
    'f16': np.array([0.5, -65504], dtype='<f2'),
    'i8': np.array([-128, 127], dtype='|i1'),
    'i16': np.array([-32768, 7], dtype='<i2'),
    'i32': np.array([-7, 0, 2147483647], dtype='<i4'),
    'i64': np.array(-1234567890123, dtype='<i8'),
    'u8': np.array([[0, 255], [17, 3]], dtype='|u1'),
    'mask': np.array([True, False, True]),
    'scalar': np.array(2.5, dtype='<f4'),
    'empty': np.zeros((0, 4), dtype='<f4'),
}
assert sorted(d.files) == sorted(want), (d.files, sorted(want))
assert d.files == sorted(d.files), d.files
for k, v in want.items():
    got = d[k]
    assert got.dtype == v.dtype, (k, got.dtype, v.dtype)
    assert got.shape == v.shape, (k, got.shape, v.shape)
    assert got.tobytes() == v.tobytes(), (k, got, v)
np.savez(resaved, **{k: d[k] for k in d.files})
]==]

T.test("bvlua's npz loads in numpy, and numpy re-saves the same bytes", function()
  local params = {
    ["Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel"] =
        bv.arange(6):reshape({2, 3}):to("float32") * 0.5 - 1,
    bf16 = bv.tensor({1.0, -2.5, 3.140625}, "bfloat16"),
    f64 = bv.tensor({0.1, -1e300}, "float64"),
    f16 = bv.tensor({0.5, -65504}, "float16"),
    i8 = bv.tensor({-128, 127}, "int8"),
    i16 = bv.tensor({-32768, 7}, "int16"),
    i32 = bv.tensor({-7, 0, 2147483647}, "int32"),
    i64 = bv.tensor(-1234567890123, "int64"),
    u8 = bv.tensor({{0, 255}, {17, 3}}, "uint8"),
    mask = bv.tensor({true, false, true}),
    scalar = bv.tensor(2.5, "float32"),
    empty = bv.zeros({0, 4}),
  }
  local ours, resaved = tmp .. "/ours.npz", tmp .. "/resaved.npz"
  bv.ckpt.save_npz(ours, params)
  run_python(NUMPY_CHECKS, ours, resaved)
  local a, b = bv.fs.read_file(ours), bv.fs.read_file(resaved)
  T.eq(#a, #b, "file sizes")
  T.truthy(a == b, "bvlua's npz and numpy's re-save differ")
  -- And back: what we wrote loads as what we saved.
  local back = bv.ckpt.load_npz(ours)
  for name, t in pairs(params) do
    T.eq(back[name]:dtype(), t:dtype(), name)
    T.truthy(back[name]:equal(t), name)
  end
end)

T.test("save_npz and load_npz errors name the culprit", function()
  T.raises(function() bv.ckpt.save_npz(tmp .. "/x.npz", {a = "not a tensor"}) end,
           "params['a'] is a string, not a bv.Tensor")
  T.raises(function() bv.ckpt.save_npz(tmp .. "/x.npz", {bv.zeros({2})}) end,
           "keys must be strings")
  T.raises(function() bv.ckpt.load_npz(tmp .. "/missing.npz") end,
           "cannot open '" .. tmp .. "/missing.npz'")
  bv.fs.write_file(tmp .. "/junk.npz", string.rep("x", 100))
  T.raises(function() bv.ckpt.npz_index(tmp .. "/junk.npz") end,
           tmp .. "/junk.npz: no ZIP end-of-central-directory record")
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
