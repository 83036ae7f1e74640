-- bv.pp: big_vision's registry, utils, ops_general and ops_text (strfmt, lower) tests, ported
-- (shared/reference/big_vision.md section 5), plus the error messages.
local T = require "tests.lua.lib.testing"
local pp = bv.pp
local null = require("bv.literal").null

local function vals(t) return t:totable() end

-- One home per big_vision name: each op file registers the ops of big_vision's file of the same
-- name (pp/ops_general.py, ops_image.py, ops_text.py, archive/randaug.py,
-- proj/paligemma/ops.py), those bvlua has, and flip_ud, bvlua's own, sits with the image ops.
T.test("op files hold the ops of big_vision's files of the same name", function()
  local files = {
    ops_general = {"value_range", "onehot", "keep", "drop", "copy", "squeeze_last_dim", "concat",
                   "pad_to_shape", "flatten", "reshape", "setdefault", "choice", "lookup",
                   "choice_no_replacement"},
    ops_image = {"decode", "resize", "resize_small", "resize_long", "inception_crop",
                 "decode_jpeg_and_inception_crop", "random_crop", "central_crop", "flip_lr",
                 "vgg_value_range", "clip_value_range", "flip_ud"},
    ops_text = {"tokenize", "lower", "strfmt", "coco_captions", "clip_i1k_label_names",
                "i21k_label_names"},
    ["archive/randaug"] = {"randaug"},
    ["proj/paligemma/ops"] = {"tolen", "tok", "masked_concat", "strjoin", "majority", "getidx"},
  }
  local real = package.loaded["bv.pp"]
  for file, want in pairs(files) do
    local got = {}
    -- The file again, with a bv.pp whose register records instead.
    package.loaded["bv.pp"] = setmetatable({register = function(name) got[#got + 1] = name end},
                                           {__index = real})
    local ok, err = pcall(dofile, "lib/bv/pp/" .. file .. ".lua")
    package.loaded["bv.pp"] = real
    T.truthy(ok, err)
    table.sort(got)
    table.sort(want)
    T.eq(got, want, file)
  end
end)

-- 5.1 registry_test: parse_name --------------------------------------------------------------

T.test("parse_op: names, positional and keyword literals", function()
  local function parsed(s)
    local name, args, kwargs = pp.parse_op(s)
    local pos = {}
    for i = 1, args.n do pos[i] = args[i] end
    return {name, pos, kwargs}
  end
  T.eq(parsed("f"), {"f", {}, {}})
  T.eq(parsed("f()"), {"f", {}, {}})
  T.eq(parsed("func(a=0,b=1,c='s')"), {"func", {}, {a = 0, b = 1, c = "s"}})
  T.eq(parsed("func(1,'foo',3)"), {"func", {1, "foo", 3}, {}})
  T.eq(parsed("func(1,'2',a=3,foo='bar')"), {"func", {1, "2"}, {a = 3, foo = "bar"}})
  T.eq(parsed("foo.bar.func(a=0,b=(1),c='s')"), {"foo.bar.func", {}, {a = 0, b = 1, c = "s"}})
  T.eq(parsed("f(x=true, y=nil, z={1, 2})"), {"f", {}, {x = true, y = null, z = {1, 2}}})
  T.eq(parsed("f((1, 2), [3], {'a': None})"), {"f", {{1, 2}, {3}, {a = null}}, {}})
end)

T.test("parse_op: syntax errors name the segment", function()
  T.raises(function() pp.parse_op("func(0") end, "missing ')' in 'func(0'")
  T.raises(function() pp.parse_op("func(a=0,,b=0)") end, "syntax error")
  T.raises(function() pp.parse_op("func(a=0,b==1,c='s')") end, "syntax error")
  T.raises(function() pp.parse_op("func(a=0,b=undefined_name,c='s')") end,
           "in 'func(a=0,b=undefined_name,c='s')'")
  T.raises(function() pp.parse_op("func(arg1=1, 3)") end,
           "positional argument follows keyword argument")
  T.raises(function() pp.parse_op("f(1) g") end, "unexpected text after ')'")
  T.raises(function() pp.parse_op("3f") end, "expected an op name")
end)

-- 5.1 registry_test: lookup binding ----------------------------------------------------------

pp.register("test_func1", function(a) return {a.arg1, a.arg2, a.arg3} end,
            "test_func1(arg1, arg2, arg3): returns its arguments")

T.test("deeply nested arguments are an error naming the position, quoting a bounded segment", function()
  local msg = T.raises(function() pp.build("onehot(3, key=" .. string.rep("[", 100000) .. ")") end,
                       "pp: bad argument: nested deeper than 256 levels at position 271")
  T.truthy(#msg < 1000, "message of " .. #msg .. " bytes")
  msg = T.raises(function() pp.build("decode|" .. string.rep("(", 100000)) end, "expected an op name")
  T.truthy(#msg < 1000, "message of " .. #msg .. " bytes")
end)

T.test("register and knows", function()
  T.truthy(pp.knows("test_func1"))
  T.truthy(not pp.knows("test_nothing"))
end)

T.test("lookup binds like Python's functools.partial", function()
  local L = pp.lookup
  T.eq(type(L("test_func1")), "function")
  T.eq(L("test_func1")({1, 2, 3}), {1, 2, 3})
  T.eq(L("test_func1(arg3=9)")({1, 2}), {1, 2, 9})
  T.eq(L("test_func1(arg2=9,arg1=99)")({arg3 = 3}), {99, 9, 3})
  T.eq(L("test_func1(arg2=9,arg1=99)")({arg1 = 1, arg3 = 3}), {1, 9, 3})
  T.eq(L("test_func1(1)")({1, 2}), {1, 1, 2})
  T.eq(L("test_func1(1)")({arg3 = 3, arg2 = 2}), {1, 2, 3})
  T.eq(L("test_func1(1, 2)")({3}), {1, 2, 3})
  T.eq(L("test_func1(1, 2)")({arg3 = 3}), {1, 2, 3})
  T.eq(L("test_func1(1, arg2=2)")({arg3 = 3}), {1, 2, 3})
  T.eq(L("test_func1(1, arg3=2)")({arg2 = 3}), {1, 3, 2})
  T.eq(L("test_func1(1, arg3=2)")({3}), {1, 3, 2})
end)

T.test("lookup binding errors (big_vision's TypeErrors)", function()
  local L = pp.lookup
  T.raises(function() L("test_func1(1, arg2=2)")({3}) end, "multiple values for argument 'arg2'")
  T.raises(function() L("test_func1(1, arg3=3)")({arg3 = 3}) end, "missing required argument 'arg2'")
  T.raises(function() L("test_func1(1, arg3=3)")({arg1 = 3}) end, "multiple values for argument 'arg1'")
  T.raises(function() L("test_func1(1, 2, 3, 4)")() end, "takes 3 positional arguments but 4")
  T.raises(function() L("test_func1(1, 2, 3, arg9=4)")() end, "unexpected keyword argument 'arg9'")
  T.raises(function() L("test_nope(1)") end, "unknown op 'test_nope' in 'test_nope(1)'")
end)

T.test("signatures: defaults, *args, keyword-only, **kwargs, None as nil", function()
  pp.register("test_sig", function(a) return a end,
              "test_sig(x, y=2, *rest, flag=False, name=None, **extra): for tests")
  local a = pp.lookup("test_sig(1, 5, 6, 7, flag=True, z='q')")()
  T.eq(a.x, 1); T.eq(a.y, 5); T.eq(a.rest, {6, 7}); T.eq(a.flag, true)
  T.eq(a.name, nil); T.eq(a.extra, {z = "q"})
  local b = pp.lookup("test_sig(1, name=None)")()
  T.eq(b.y, 2); T.eq(b.rest, {}); T.eq(b.flag, false); T.eq(b.name, nil)
end)

T.test("a doc without a signature passes the raw arguments", function()
  pp.register("test_raw", function(a) return a end, "no signature here")
  T.eq(pp.lookup("test_raw(1, 'x', k=None, j=2)")(), {1, "x", j = 2})
end)

T.test("registering again replaces (a config may override a built-in op)", function()
  pp.register("test_twice", function() return "first" end, "test_twice()")
  pp.register("test_twice", function() return "second" end, "test_twice()")
  T.eq(pp.lookup("test_twice")(), "second")
  T.raises(function() pp.register("test_bad", 3) end, "factory must be a function")
  T.raises(function() pp.register("bad name", function() end) end, "bad op name")
end)

-- 5.2 utils_test -----------------------------------------------------------------------------

T.test("maybe_repeat", function()
  T.eq(pp.maybe_repeat(1, 3), {1, 1, 1})
  T.eq(pp.maybe_repeat({1, 2}, 2), {1, 2})
  T.eq(pp.maybe_repeat("ab", 2), {"ab", "ab"})
end)

T.test("inkeyoutkey", function()
  pp.register("test_ikok", pp.inkeyoutkey(function(a)
    return function(x) return a.scale * x + a.shift end
  end), "test_ikok(shift, scale=0)")
  local f = pp.build("test_ikok(1, 2, inkey='k_in', outkey='k_out')")
  T.eq(f({k_in = 2, other = 3}), {k_in = 2, k_out = 5, other = 3})
  T.eq(pp.build("test_ikok(1, inkey='k', outkey='k')")({k = 6, other = 3}), {k = 1, other = 3})
  T.eq(pp.build("test_ikok(5, 2)")({other = 6, image = 3}), {other = 6, image = 11})
  T.eq(pp.build("test_ikok(5, 2, key='z')")({z = 1}), {z = 7})
  T.raises(function() pp.build("test_ikok(1)")({other = 1}) end,
           "pp op 'test_ikok(1)': no key 'image' in the example (keys: other)")
end)

-- The builder ----------------------------------------------------------------------------------

T.test("build: empty segments are skipped, errors name the op", function()
  local f = pp.build("||test_ikok(1, 1)|||test_ikok(0, 2)||")
  T.eq(f({image = 1}).image, 4)
  T.eq(pp.build("")({a = 1}), {a = 1})
  T.eq(pp.build(nil)({a = 1}), {a = 1})
  T.raises(function() pp.build("test_ikok(1)|nope(2)") end, "unknown op 'nope' in 'nope(2)'")
  T.raises(function() pp.build("test_func1(1, 2, 3, 4)") end, "pp op 'test_func1(1, 2, 3, 4)'")
  T.raises(function() pp.build("test_ikok(1)")(5) end, "an example must be a table")
  pp.register("test_boom", function() return function() error("kaput", 0) end end, "test_boom()")
  T.raises(function() pp.build("test_boom")({}) end, "pp op 'test_boom': kaput")
end)

T.test("check: unknown ops with a suggestion, bad syntax, nothing built", function()
  local built = 0
  pp.register("test_counted", function() built = built + 1; return function(d) return d end end,
              "test_counted()")
  pp.check("test_counted|test_counted")
  T.eq(built, 0)
  T.raises(function() pp.check("test_countd") end,
           "unknown op 'test_countd' in 'test_countd' (did you mean 'test_counted'?)")
  T.raises(function() pp.check("test_counted(") end, "test_counted(")
end)

T.test("random ops get the rng handed to the pp function", function()
  pp.register("test_rand", function() return function(d, rng) d.r = rng:uniform(); return d end end,
              "test_rand()")
  local f = pp.build("test_rand")
  T.eq(f({}, bv.rng(3)).r, f({}, bv.rng(3)).r)
end)

-- 5.4 ops_general_test --------------------------------------------------------------------------

local function img640()
  return (bv.rand({640, 480, 3}, bv.rng(0)) * 255):to("uint8")
end

T.test("value_range", function()
  local out = pp.build("value_range(-0.5, 0.5)")({image = img640()}).image
  T.eq(out:dtype(), "float32")
  T.truthy(out:max():item() <= 0.5 and out:min():item() >= -0.5)
  local custom = pp.build("value_range(-0.5, 0.5, -256, 255, True)")({image = img640()}).image
  T.truthy(custom:max():item() <= 0.5 and custom:min():item() >= 0.0)
  local x = pp.build("value_range(0, 1)")({image = bv.tensor({0, 51, 255}, "uint8")}).image
  T.near(x[2]:item(), 0.2, 1e-7)
  local pc = pp.build("value_range(0, 1, in_min=[0, 10], in_max=[10, 20])")(
    {image = bv.tensor({{5, 15}}, "uint8")}).image
  T.eq(vals(pc), {{0.5, 0.5}})
  T.raises(function()
    pp.build("value_range(0, 1, in_min=[0, 1, 2])")({image = bv.zeros({2, 2})})
  end, "in_min has 3 values but the input [2x2] has 2 channels")
  -- uint8 images take a lookup-table path: it must give exactly the general path's values.
  local img = img640()
  for _, spec in ipairs({"value_range(-1, 1)", "value_range(0.1, 0.9, [3, 10, 0], [250, 200, 255], True)",
                         "value_range(-0.5, 0.5, -256, 255, True)"}) do
    local fast = pp.build(spec)({image = img}).image
    local general = pp.build(spec)({image = img:to("float32")}).image
    T.truthy(fast == general, spec .. ": uint8 and float32 inputs agree exactly")
  end
end)

T.test("vgg and clip value ranges", function()
  local x = pp.build("vgg_value_range")({image = bv.full({1, 1, 3}, 255, "uint8")}).image
  T.near(x[1][1][1]:item(), (255 - 0.485 * 255) / (0.229 * 255), 1e-5)
  local c = pp.build("clip_value_range")({image = bv.zeros({1, 1, 3}, "uint8")}).image
  T.near(c[1][1][3]:item(), -0.40821073 / 0.27577711, 1e-5)
end)

T.test("keep, drop, copy", function()
  local function d() return {image = 1, labels = 2, something = 3} end
  T.eq(pp.build('keep("image", "labels")')(d()), {image = 1, labels = 2})
  T.eq(pp.build('drop("image", "labels")')(d()), {something = 3})
  T.eq(pp.build('copy("labels", "y")')(d()), {image = 1, labels = 2, something = 3, y = 2})
end)

T.test("onehot", function()
  local function oh(spec, labels) return vals(pp.build(spec)({labels = labels}).labels) end
  T.eq(oh('onehot(4, "labels", multi=True)', bv.tensor(2)), {0.0, 0.0, 1.0, 0.0})
  T.eq(oh('onehot(4, "labels")', 2), {0.0, 0.0, 1.0, 0.0})  -- a plain Lua number
  local three = bv.tensor({2, 3, 0})
  T.eq(oh('onehot(4, "labels", multi=False)', three),
       {{0.0, 0.0, 1.0, 0.0}, {0.0, 0.0, 0.0, 1.0}, {1.0, 0.0, 0.0, 0.0}})
  T.eq(oh('onehot(4, "labels", multi=True)', three), {1.0, 0.0, 1.0, 1.0})
  T.eq(oh('onehot(4, "labels", multi=False)', bv.tensor({{2, 3}, {0, 1}})),
       {{{0.0, 0.0, 1.0, 0.0}, {0.0, 0.0, 0.0, 1.0}}, {{1.0, 0.0, 0.0, 0.0}, {0.0, 1.0, 0.0, 0.0}}})
  local sm = pp.build('onehot(4, "labels", multi=False, on=0.8, off=0.1)')({labels = three}).labels
  T.truthy(sm:allclose(bv.tensor({{.1, .1, .8, .1}, {.1, .1, .1, .8}, {.8, .1, .1, .1}})))
  local mh = pp.build('onehot(4, "labels", multi=True, on=0.8, off=0.1)')({labels = three}).labels
  T.truthy(mh:allclose(bv.tensor({.8, .1, .8, .8})))
  -- out of range: an error naming the label and the depth (tf.one_hot would give all off)
  T.raises(function() oh('onehot(3)', bv.tensor(7)) end, "label 7 is out of range for depth 3")
  T.raises(function() oh('onehot(3)', -1) end, "label -1 is out of range for depth 3")
  T.raises(function() oh('onehot(3, multi=False)', bv.tensor({0, 2, 5})) end,
           "label 5 is out of range for depth 3")
  T.raises(function() oh('onehot(3, multi=True)', bv.tensor({0, 3})) end,
           "label 3 is out of range for depth 3")
  local r = pp.build('onehot(3, key="label", key_result="labels")')({label = 1})
  T.eq(vals(r.labels), {0.0, 1.0, 0.0})
  T.eq(r.label, 1)
end)

T.test("squeeze_last_dim, reshape, concat", function()
  T.eq(pp.build("squeeze_last_dim")({image = bv.zeros({32, 32, 3, 1})}).image:shape(), {32, 32, 3})
  T.eq(pp.build("reshape(new_shape=(8, 32, 32, 3))")({image = bv.zeros({8, 3072})}).image:shape(),
       {8, 32, 32, 3})
  local d = pp.build("concat(['a', 'b'], axis=0)")({a = bv.tensor({1, 2}), b = bv.tensor({3})})
  T.eq(vals(d.a), {1, 2, 3})
  local e = pp.build("concat(['a', 'b'], outkey='c')")({a = bv.zeros({2, 1}), b = bv.ones({2, 2})})
  T.eq(e.c:shape(), {2, 3})
end)

T.test("pad_to_shape", function()
  for _, case in ipairs({{4, -16}, {3, -32}, {10, 80}, {1, -64}}) do
    local x = pp.build("pad_to_shape((8, 10), pad_value=-1, key='x')")({x = bv.ones({8, case[1]})}).x
    T.eq(x:shape(), {8, 10})
    T.eq(x:sum():item(), case[2] + 0.0)
  end
  local n = pp.build("pad_to_shape((None, 6), pad_value=-1, key='x')")({x = bv.ones({8, 4})}).x
  T.eq(n:shape(), {8, 6}); T.eq(n:sum():item(), 16.0)
  local function padded(where)
    return pp.build("pad_to_shape((8, 6), pad_value=0, where='" .. where .. "', key='x')")(
      {x = bv.ones({8, 4})}).x
  end
  T.eq(padded("after"):sum():item(), 32.0)
  T.eq(padded("before")[{1, 1}]:item(), 0.0)
  T.eq(padded("both")[{1, 1}]:item(), 0.0); T.eq(padded("both")[{1, -1}]:item(), 0.0)
  T.eq(padded("after")[{1, -1}]:item(), 0.0)
  T.raises(function() padded("sideways") end, "where must be")
  T.raises(function()
    pp.build("pad_to_shape((2, 6), key='x')")({x = bv.ones({8, 4})})
  end, "larger than the target 2")
  -- (4) is the number 4 in Python, not a shape (found by the pp fuzzer).
  T.raises(function() pp.build("pad_to_shape((4))") end,
           "pad_to_shape: shape must be a list such as (4,) or [4], got 4")
  T.eq(pp.build("pad_to_shape((4,), key='x')")({x = bv.ones({2})}).x:shape(), {4})
end)

T.test("flatten", function()
  local out = pp.build("flatten")({a = {b = {1, 2, 3}}, c = "str"})
  T.eq(out, {["a/b"] = {1, 2, 3}, c = "str"})
end)

T.test("setdefault", function()
  local function d()
    return {empty_image = bv.zeros({0, 0, 0}), image = bv.arange(9):reshape({3, 3}),
            empty_text = {}, text = {"Hello", "World"}}
  end
  T.eq(vals(pp.build('setdefault("empty_image", 1)')(d()).empty_image), {{{1.0}}})
  T.eq(vals(pp.build('setdefault("image", 1)')(d()).image), {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}})
  T.eq(pp.build('setdefault("empty_text", "Lucas")')(d()).empty_text, {"Lucas"})
  T.eq(pp.build('setdefault("text", "Lucas")')(d()).text, {"Hello", "World"})
  T.eq(pp.build('setdefault("missing", "x")')(d()).missing, "x")
end)

T.test("choice", function()
  local rng = bv.rng(0)
  local function data()
    return {one_f32 = bv.tensor({0.42}), two_f32 = bv.tensor({3.14, 0.42}), one_str = {"Hi"},
            two_str = {"Hi", "Lucas"}, one_vec = bv.tensor({{0.0, 1.0}}),
            two_vec = bv.tensor({{0.0, 1.0}, {2.0, 3.0}})}
  end
  local function pick(spec) return pp.build(spec)(data(), rng) end
  T.near(pick('choice(inkey="one_f32", outkey="choice")').choice:item(), 0.42, 1e-6)
  T.eq(pick('choice(inkey="one_str", outkey="choice")').choice, "Hi")
  for _ = 1, 10 do
    local v = pick('choice(inkey="two_f32", outkey="choice")').choice:item()
    T.truthy(math.abs(v - 3.14) < 1e-5 or math.abs(v - 0.42) < 1e-5, "two_f32 element")
    local s = pick('choice(inkey="two_str", outkey="choice")').choice
    T.truthy(s == "Hi" or s == "Lucas", "two_str element")
  end
  -- n == number of items keeps the data identical and in order
  T.eq(pick('choice(n=2, key=["two_str"])').two_str, {"Hi", "Lucas"})
  T.eq(pick('choice(n=[2, 2], key=["two_str"])').two_str, {"Hi", "Lucas"})
  T.eq(vals(pick('choice(n=2, key=["two_vec"])').two_vec), {{0.0, 1.0}, {2.0, 3.0}})
  T.eq(vals(pick('choice(n=1, key=["one_vec"])').one_vec), {{0.0, 1.0}})
  -- the same choice for every key
  for _ = 1, 10 do
    local d = pick('choice(n=1, key=["two_f32", "two_str"])')
    local f, s = d.two_f32[1]:item(), d.two_str[1]
    T.truthy((math.abs(f - 3.14) < 1e-5 and s == "Hi") or (math.abs(f - 0.42) < 1e-5 and s == "Lucas"),
             "consistent choice")
    local r = pick('choice(n=[1, 2], key=["two_str"])').two_str
    T.truthy(#r == 1 or (r[1] == "Hi" and r[2] == "Lucas"), "ordered subset")
  end
  T.raises(function() pick('choice(n=3, key=["two_str"])') end, "needs at least 3 items, got 2")
  T.eq(#pick('choice(n=3, key=["two_str"], fewer_ok=True)').two_str, 2)
end)

-- 5.6 ops_text_test: lower and strfmt --------------------------------------------------------

T.test("lower", function()
  T.eq(pp.build("lower")({text = "Hello world ScAlAr!"}).text, "hello world scalar!")
  T.eq(pp.build("lower")({text = {"Decoded Array!"}}).text, {"decoded array!"})
  T.eq(pp.build("lower(key='t')")({t = {"aA", "bB"}}).t, {"aa", "bb"})
end)

T.test("strfmt", function()
  local data = {int = bv.tensor(42, "uint8"), float = bv.tensor(3.14, "float32"),
                vec = bv.arange(3), empty_str = "", regex_problem1 = [[no \replace pattern]],
                regex_problem2 = [[yes \1 pattern]]}
  local cases = {
    {"Nothing", "Nothing"}, {"{int}", "42"}, {"A{int}", "A42"}, {"{int}A", "42A"},
    {"{int}{int}", "4242"}, {"A{int}A{int}A", "A42A42A"}, {"A{float}A", "A3.14A"},
    {"A{float}A{int}", "A3.14A42"}, {"A{vec}A", "A[0 1 2]A"}, {"A{empty_str}A", "AA"},
    {"{empty_str}", ""}, {"A{regex_problem1}A", [[Ano \replace patternA]]},
    {"A{regex_problem2}A", [[Ayes \1 patternA]]},
  }
  for _, c in ipairs(cases) do
    local d = {}
    for k, v in pairs(data) do d[k] = v end
    T.eq(pp.build(string.format("strfmt(%q)", c[1]))(d).text, c[2], c[1])
  end
  T.eq(pp.build("strfmt('{{x}}', outkey='o')")({}).o, "{x}")
  T.raises(function() pp.build("strfmt('{a:3}')") end, "only plain {field} names")
  T.raises(function() pp.build("strfmt('{nope}')")({}) end, "no key 'nope'")
end)

T.run()
