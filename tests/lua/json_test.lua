local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local literal = require "bv.literal"

local encode, decode = json.encode, json.decode

T.test("scalars", function()
  T.eq(encode(true), "true")
  T.eq(encode(false), "false")
  T.eq(encode(literal.null), "null")
  T.eq(encode(3), "3")
  T.eq(encode(-42), "-42")
  T.eq(encode("abc"), '"abc"')
end)

T.test("floats: shortest round trip, spelled like Python, never mistaken for integers", function()
  T.eq(encode(1.0), "1.0")
  T.eq(encode(100.0), "100.0")
  T.eq(encode(0.03), "0.03")
  T.eq(encode(0.1), "0.1")
  T.eq(encode(1e-5), "1e-05")
  T.eq(encode(1e16), "1e+16")
  T.eq(encode(-0.0), "-0.0")
  T.eq(encode(1 / 3), "0.3333333333333333")
  T.eq(encode(123456.789), "123456.789")
  for _, x in ipairs({0.1 + 0.2, 2 ^ -1074, 1.7976931348623157e308, 3e-7, 1e15, 12345678.9}) do
    local back = decode(encode(x))
    T.eq(math.type(back), "float", "type of " .. encode(x))
    T.eq(back, x, "round trip of " .. encode(x))
  end
end)

T.test("inf and nan are errors naming the path", function()
  T.raises(function() encode({lr = math.huge}) end, 'cannot encode inf at "lr"')
  T.raises(function() encode({a = {1, 0 / 0}}) end, 'cannot encode nan at "a[2]"')
end)

T.test("strings are escaped; UTF-8 passes through", function()
  T.eq(encode('a"b\\c\n\t'), [["a\"b\\c\n\t"]])
  T.eq(encode("\1\31\127"), [["\u0001\u001f\u007f"]])
  T.eq(encode("h\u{e9}\u{1F600}"), '"h\u{e9}\u{1F600}"')
  T.raises(function() encode({s = "\xff"}) end, 'invalid UTF-8 in string at "s"')
end)

T.test("tables: 1..n is an array, empty is {}, keys are sorted", function()
  T.eq(encode({1, 2, 3}), "[1,2,3]")
  T.eq(encode({}), "{}")
  T.eq(encode({b = 1, a = 2, c = {}}), '{"a":2,"b":1,"c":{}}')
  T.eq(encode({1, literal.null, 3}), "[1,null,3]")
  T.eq(encode({x = {{y = 1}}}), '{"x":[{"y":1}]}')
end)

T.test("indent gives one item per line", function()
  local want = table.concat({
    "{",
    '  "a": [',
    "    1,",
    "    2.5",
    "  ],",
    '  "b": {',
    '    "c": "d"',
    "  },",
    '  "e": {}',
    "}",
  }, "\n")
  T.eq(encode({b = {c = "d"}, a = {1, 2.5}, e = {}}, {indent = 2}), want)
end)

T.test("unencodable values name the path", function()
  T.raises(function() encode({input = {pp = print}}, {what = "config.json"}) end,
    'config.json: cannot encode function at "input.pp"')
  T.raises(function() encode({co = coroutine.create(print)}) end, 'cannot encode thread at "co"')
  T.raises(function() encode({[1] = 1, [3] = 3}) end, "object keys must be strings")
  T.raises(function() encode({1, 2, x = 3}) end, "object keys must be strings")
  T.raises(function() encode({[true] = 1}) end, "cannot encode key true (a boolean)")
  local t = {a = {}}
  t.a.b = t
  T.raises(function() encode(t) end, 'cycle at "a.b"')
end)

T.test("a shared (non-cyclic) table is fine", function()
  local shared = {1}
  T.eq(encode({a = shared, b = shared}), '{"a":[1],"b":[1]}')
end)

T.test("decode values", function()
  local v = decode(' {"a": [1, 2.0, -3e2, null, true, false], "b": {}, "c": "x"} ')
  T.eq(v.a[1], 1)
  T.eq(math.type(v.a[1]), "integer")
  T.eq(math.type(v.a[2]), "float")
  T.eq(v.a[3], -300.0)
  T.truthy(v.a[4] == literal.null, "null decodes to literal.null")
  T.eq(#v.a, 6)
  T.eq(v.b, {})
  T.eq(v.c, "x")
  T.eq(decode("[]"), {})
  T.eq(decode("0"), 0)
  T.eq(decode("-0.5"), -0.5)
end)

T.test("decode string escapes", function()
  T.eq(decode([["a\"b\\c\/d\n\t\u00e9"]]), 'a"b\\c/d\n\t\u{e9}')
  T.eq(decode([["\ud83d\ude00"]]), "\u{1F600}")
end)

T.test("decode errors give the byte offset", function()
  T.raises(function() decode("01") end, "malformed number at byte 1")
  T.raises(function() decode("1.") end, "malformed number at byte 1")
  T.raises(function() decode("1e") end, "malformed number at byte 1")
  T.raises(function() decode("[1,]") end, "at byte 4")
  T.raises(function() decode('{"a" 1}') end, "expected ':' at byte 6")
  T.raises(function() decode("{a: 1}") end, "expected a string key at byte 2")
  T.raises(function() decode("[1] x") end, "unexpected text after the value at byte 5")
  T.raises(function() decode('"a\nb"') end, "control character in string at byte 3")
  T.raises(function() decode('"abc') end, "unterminated string at byte 1")
  T.raises(function() decode("nul") end, "unexpected 'nul' at byte 1")
  T.raises(function() decode("") end, "unexpected end of input at byte 1")
  T.raises(function() decode("NaN") end, "unexpected 'NaN'")
end)

T.test("encode then decode gives the same value back", function()
  local v = {seed = 0, lr = 0.03, name = "bit", flags = {true, false},
             nested = {list = {1, 2.5, "x", literal.null}, empty = {}}}
  T.eq(decode(encode(v)), v)
  T.eq(decode(encode(v, {indent = 4})), v)
end)

T.run()
