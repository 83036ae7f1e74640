-- bv.tree: big_vision's utils_test.TreeTest cases (reference section 5.7), in Lua tables.
local T = require "tests.lua.lib.testing"
local tree = require "bv.tree"

local d1 = {w1 = 1, w2 = 2, w34 = {3, 4}}  -- w34 stands for the Python tuple (3, 4)
local d2 = {conv1 = {kernel = 0, bias = 1}, conv2 = {kernel = 2, bias = 3}}

T.test("traverse: sorted names, lists by 0-based index, inner nodes after their children", function()
  T.eq(tree.traverse(d1), {{"w1", 1}, {"w2", 2}, {"w34/0", 3}, {"w34/1", 4}})
  T.eq(tree.traverse(d2), {{"conv1/bias", 1}, {"conv1/kernel", 0}, {"conv2/bias", 3},
                           {"conv2/kernel", 2}})
  T.eq(tree.traverse(d2, true), {{"conv1/bias", 1}, {"conv1/kernel", 0}, {"conv1", d2.conv1},
                                 {"conv2/bias", 3}, {"conv2/kernel", 2}, {"conv2", d2.conv2},
                                 {"", d2}})
  local names, values = tree.flatten(d2)
  T.eq(names, {"conv1/bias", "conv1/kernel", "conv2/bias", "conv2/kernel"})
  T.eq(values, {1, 0, 3, 2})
  -- Keys that hold "/" give the nested form's names (ordered by key); tensors are leaves.
  local t = bv.zeros({2})
  T.eq(tree.flatten({["conv1/bias"] = 1, conv1 = {kernel = t}}), {"conv1/kernel", "conv1/bias"})
  T.raises(function() tree.traverse({1, 2, x = 3}) end, "mixes list entries and named keys")
end)

T.test("map_with_names", function()
  T.eq(tree.map_with_names(function(name, x) return name:find("w2") and -x or x end, d1),
       {w1 = 1, w2 = -2, w34 = {3, 4}})
  T.eq(tree.map_with_names(function(name, x1, x2) return name:find("w2") and x1 + x2 or x1 end,
                           d1, d1),
       {w1 = 1, w2 = 4, w34 = {3, 4}})
end)

T.test("recover_tree", function()
  T.eq(tree.recover({"a/b", "a/c/x", "a/c/y", "d"}, {0, 1, 2, 3}),
       {a = {b = 0, c = {x = 1, y = 2}}, d = 3})
  T.raises(function() tree.recover({"a", "a/b"}, {1, 2}) end, "'a/b' is both a leaf and a node")
  T.raises(function() tree.recover({"a", "a"}, {1, 2}) end, "'a' given twice")
end)

T.test("make_mask_trees: first full match only", function()
  local F, Tr = false, true
  local t = {a = {b = 0, x = 1}, b = {x = 2, y = 3}}
  -- 'b' matches '^b' only and not '.*/b'; "b/x" is matched by the first rule only.
  T.eq(tree.make_mask_trees(t, {".*/x", "b/.*"}),
       {{a = {b = F, x = Tr}, b = {x = Tr, y = F}}, {a = {b = F, x = F}, b = {x = F, y = Tr}}})
end)

T.test("tree_get", function()
  local t = {a = {b = 0, x = 1}, b = {x = 2, y = 3}}
  T.eq(tree.get(t, "a/b"), 0)
  T.eq(tree.get(t, "a/x"), 1)
  T.eq(tree.get(t, "b/x"), 2)
  T.eq(tree.get(t, "b/y"), 3)
  T.eq(tree.get(t, "a"), t.a)
  T.eq(tree.get(t, "b"), t.b)
  T.raises(function() tree.get(t, "a/z") end, "no 'a/z'; available: a/b, a/x, a, b/x")
end)

T.test("tree_replace: rules in order, re.match prefixes, false removes", function()
  local t = {a = {b = 2, c = 3}, c = 4}
  local rules = {
    {"a/b", "a/b/x"},  -- 'a/b' becomes 'a/b/x'
    {".*c", "C"},      -- 'c' becomes 'C' ('a/c' is removed below)
    {"C", "D"},        -- 'C' (which was 'c') becomes 'D'
    {".*/c", false},   -- removes 'a/c'
  }
  T.eq(tree.replace(t, rules), {D = 4, a = {b = {x = 2}}})
  -- Groups, as Python's Match.expand: \1 and \g<1>.
  T.eq(tree.replace({enc = {l0 = 1, l1 = 2}}, {{"enc/l(%d)", "e/\\1"}}), {enc = {l0 = 1, l1 = 2}})
  T.eq(tree.replace({enc = {l0 = 1, l1 = 2}}, {{"enc/l([0-9])", "layer\\g<1>"}}),
       {layer0 = 1, layer1 = 2})
  T.raises(function() tree.replace(t, {{"a", 3}}) end, "rule 1 must be {regex, replacement or false}")
  T.raises(function() tree.replace(t, {{"(", "x"}}) end, "bad regex '('")
end)

T.run()
