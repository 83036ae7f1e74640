-- big_vision's remaining general pp ops: lookup and choice_no_replacement (pp/ops_general.py),
-- coco_captions, clip_i1k_label_names and i21k_label_names (pp/ops_text.py), strjoin, majority
-- and getidx (pp/proj/paligemma/ops.py). Expected values follow big_vision's code.
local T = require "tests.lua.lib.testing"
local json = require "bv.json"
local pp = bv.pp

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local function write(name, text)
  local path = tmp .. "/" .. name
  bv.fs.write_file(path, text)
  return path
end

local function run(spec, data, seed) return pp.build(spec)(data, bv.rng(seed or 0)) end

-- lookup ---------------------------------------------------------------------------------------

T.test("lookup: a key per line maps to its 0-based line number (int64), unknown to -1", function()
  local f = write("animals.txt", "cat\ndog\nbird\n")
  local out = run(string.format("lookup('%s', key='s')", f), {s = "dog"})
  T.eq(out.s:dim(), 0); T.eq(out.s:dtype(), "int64"); T.eq(out.s:item(), 1)
  out = run(string.format("lookup('%s', inkey='s', outkey='i')", f), {s = {"bird", "cow", "cat"}})
  T.eq(out.i:totable(), {2, -1, 0}); T.eq(out.s, {"bird", "cow", "cat"})
  -- InKeyOutKey's default key is image, as in big_vision.
  T.eq(run(string.format("lookup('%s')", f), {image = "cat"}).image:item(), 0)
  -- An empty list gives an empty tensor; an empty file knows no key.
  T.eq(run(string.format("lookup('%s', key='s')", f), {s = {}}).s:shape(), {0})
  local empty = write("empty.txt", "")
  T.eq(run(string.format("lookup('%s', key='s')", empty), {s = "cat"}).s:item(), -1)
  -- Python's splitlines: \r\n and \r end lines too, and no final newline is needed.
  local crlf = write("crlf.txt", "a\r\nb\rc")
  T.eq(run(string.format("lookup('%s', key='s')", crlf), {s = {"c", "b", "a"}}).s:totable(),
       {2, 1, 0})
end)

T.test("lookup: key<sep>value lines map to their value (int32)", function()
  local f = write("pairs.txt", "cat,7\ndog,-2\n")
  local out = run(string.format("lookup('%s', sep=',', key='s')", f), {s = {"dog", "x", "cat"}})
  T.eq(out.s:dtype(), "int32"); T.eq(out.s:totable(), {-2, -1, 7})
  local tab = write("tab.txt", "a b\t 3\n")
  T.eq(run(string.format("lookup('%s', sep='\\t', key='s')", tab), {s = "a b"}).s:item(), 3)
end)

T.test("lookup: errors name the op, the file, the line or the key", function()
  local f = write("l.txt", "cat\ndog\n")
  T.raises(function() pp.build("lookup('" .. tmp .. "/nope.txt')") end,
           "lookup: cannot read mapping '" .. tmp .. "/nope.txt'")
  T.raises(function() pp.build("lookup('names.npz')") end, "lookup: mapping 'names.npz' is an .npz")
  local three = write("three.txt", "a,1,2\n")
  T.raises(function() pp.build(string.format("lookup('%s', sep=',')", three)) end,
           three .. ":1 must be key,value (one ','), got 'a,1,2'")
  local notint = write("notint.txt", "a,1\nb,x\n")
  T.raises(function() pp.build(string.format("lookup('%s', sep=',')", notint)) end,
           notint .. ":2: the value 'x' is not an integer")
  local dup = write("dup.txt", "a\nb\na\n")
  T.raises(function() pp.build(string.format("lookup('%s')", dup)) end,
           "key 'a' on line 1 and again on line 3 with another value")
  T.raises(function() run(string.format("lookup('%s', key='s')", f), {s = bv.tensor({1})}) end,
           "lookup: expected a string or a list of strings, got a tensor")
  T.raises(function() run(string.format("lookup('%s', key='s')", f), {t = "cat"}) end,
           "no key 's' in the example (keys: t)")
  T.raises(function() pp.build("lookup()") end, "missing required argument 'mapping'")
end)

-- choice_no_replacement ------------------------------------------------------------------------

local function sorted(t)
  local c = {table.unpack(t)}
  table.sort(c)
  return c
end

-- The items one example gets over `visits` visits, each visit with its own random stream.
local function visits(spec, example, nvisits, seed0)
  local fn, got = pp.build(spec), {}
  for v = 1, nvisits do
    local ex = {}
    for k, x in pairs(example) do ex[k] = x end
    got[v] = fn(ex, bv.rng((seed0 or 0) + v))
  end
  return got
end

T.test("choice_no_replacement: every item once per round, a new order each round", function()
  bv.pp_state.forget_visits("")
  local got = visits("choice_no_replacement(key='t')", {id = "e1", t = {"a", "b", "c"}}, 9)
  local picks = {}
  for i, ex in ipairs(got) do picks[i] = ex.t end
  for round = 0, 2 do
    T.eq(sorted({picks[3 * round + 1], picks[3 * round + 2], picks[3 * round + 3]}),
         {"a", "b", "c"}, "round " .. round)
  end
  -- Rounds are random orders: over 30 examples the first picks are not all the same.
  local first = {}
  for i = 1, 30 do
    first[run("choice_no_replacement(key='t')", {_id = i, t = {"a", "b", "c"}}, i).t] = true
  end
  T.truthy(first.a and first.b and first.c, "each item is sometimes picked first")
end)

T.test("choice_no_replacement: the same for a seed; counted by _id, else id", function()
  local function sequence()
    bv.pp_state.forget_visits("")
    local out = {}
    for _, id in ipairs({"x", "y"}) do
      local got = visits("choice_no_replacement(key='t')", {id = id, t = {1, 2, 3, 4}}, 8)
      for _, ex in ipairs(got) do out[#out + 1] = ex.t end
    end
    return out
  end
  local a, b = sequence(), sequence()
  T.eq(a, b)
  T.eq(sorted({table.unpack(a, 1, 4)}), {1, 2, 3, 4})
  T.eq(sorted({table.unpack(a, 9, 12)}), {1, 2, 3, 4})
  -- _id wins over id: the same _id under two ids is one example.
  bv.pp_state.forget_visits("")
  local fn, seen = pp.build("choice_no_replacement(key='t')"), {}
  for v = 1, 2 do
    seen[v] = fn({_id = 5, id = "id" .. v, t = {"p", "q"}}, bv.rng(v)).t
  end
  T.eq(sorted(seen), {"p", "q"})
end)

T.test("choice_no_replacement: the same item of every key, outkey with {key}, tensors", function()
  bv.pp_state.forget_visits("")
  local spec = "choice_no_replacement(inkey=['q', 'a', 'm'], outkey=['{key}_1', 'answer', 'm'])"
  for _, ex in ipairs(visits(spec, {id = "e", q = {"x", "y", "z"}, a = {"X", "Y", "Z"},
                                    m = bv.tensor({{1, 2}, {3, 4}, {5, 6}})}, 6)) do
    T.eq(ex.q_1:upper(), ex.answer)
    local row = ({x = {1, 2}, y = {3, 4}, z = {5, 6}})[ex.q_1]
    T.eq(ex.m:totable(), row)
    T.eq(ex.q, {"x", "y", "z"})
  end
  -- One item: always it.
  T.eq(run("choice_no_replacement(key='t')", {id = "one", t = {"only"}}).t, "only")
end)

T.test("choice_no_replacement: a visit's item is a function of its epoch and seed", function()
  -- A pipeline passes the example's visit: its source's epoch and the pipeline's seed.
  bv.pp_state.forget_visits("")
  local fn = pp.build("choice_no_replacement(key='t')")
  local function pick(epoch, seed, id)
    return fn({id = id or "e", t = {0, 1, 2, 3, 4}}, nil, {epoch = epoch, seed = seed}).t
  end
  local rounds = {}
  for e = 0, 14 do rounds[#rounds + 1] = pick(e, 7) end
  for r = 0, 2 do
    T.eq(sorted({table.unpack(rounds, 5 * r + 1, 5 * r + 5)}), {0, 1, 2, 3, 4}, "round " .. r)
  end
  -- Asked in any order, any number of times: the same answers (nothing is counted).
  for e = 14, 0, -1 do T.eq(pick(e, 7), rounds[e + 1], "epoch " .. e) end
  T.eq(bv.pp_state.forget_visits(""), 0)
  -- Rounds, seeds and examples get their own orders.
  local function order(seed, id, r)
    local o = {}
    for e = 5 * r, 5 * r + 4 do o[#o + 1] = pick(e, seed, id) end
    return table.concat(o, ",")
  end
  local distinct, n = {}, 0
  for _, o in ipairs({order(7, "e", 0), order(7, "e", 1), order(7, "e", 2), order(8, "e", 0),
                      order(7, "f", 0), order(9, "g", 3)}) do
    if not distinct[o] then n = n + 1 end
    distinct[o] = true
  end
  T.truthy(n >= 5, "six orders of five items, " .. n .. " distinct")
  T.raises(function() bv.pp_state.shuffled_item(0, "s", "i", -1, 3) end, "visit must be >= 0")
  T.raises(function() bv.pp_state.shuffled_item(0, "s", "i", 0, 0) end, "at least one item")
end)

-- Eight examples of four items read in batches of eight: `batches` epochs.
local function pipeline_picks(workers, seed, position, batches)
  local lines = {}
  for i = 0, 7 do
    lines[#lines + 1] = json.encode({v = {10 * i, 10 * i + 1, 10 * i + 2, 10 * i + 3}})
  end
  local f = write("cnr.jsonl", table.concat(lines, "\n") .. "\n")
  local it = bv.data.training({data = {name = "bv:jsonl", fname = f}, batch_size = 8,
                               pp = "choice_no_replacement(key='v')"},
                              {seed = seed, workers = workers, position = position})
  local out = {}
  for _ = 1, batches or 8 do out[#out + 1] = it:next().v:totable() end
  return out, it
end

T.test("choice_no_replacement: in a pipeline, rounds follow epochs, whatever the workers", function()
  -- Four workers used to share a visit counter, and the visit that ran first took the round's
  -- next item: batches then depended on thread timing (CI saw it once).
  for _ = 1, 3 do T.eq(pipeline_picks(4, 1), pipeline_picks(1, 1), "4 workers as 1") end
  local per_example = {}
  for _, batch in ipairs(pipeline_picks(4, 1)) do
    for _, v in ipairs(batch) do
      local e = v // 10
      per_example[e] = per_example[e] or {}
      table.insert(per_example[e], v % 10)
    end
  end
  for e = 0, 7 do
    local got = per_example[e]
    T.eq(sorted({table.unpack(got, 1, 4)}), {0, 1, 2, 3}, "example " .. e .. ", round 1")
    T.eq(sorted({table.unpack(got, 5, 8)}), {0, 1, 2, 3}, "example " .. e .. ", round 2")
  end
  T.truthy(not T.deep_eq(pipeline_picks(1, 2), pipeline_picks(1, 1)), "another seed, other picks")
end)

T.test("choice_no_replacement: a resumed pipeline picks as the uninterrupted one", function()
  local whole = pipeline_picks(2, 3)
  local _, it = pipeline_picks(2, 3, nil, 3)
  local rest = pipeline_picks(2, 3, it:position(), 5)
  for i = 1, 5 do T.eq(rest[i], whole[i + 3], "batch " .. (i + 3)) end
end)

T.test("choice_no_replacement: errors name the op and the key", function()
  local spec = "choice_no_replacement(key='t')"
  T.raises(function() run(spec, {t = {"a"}}) end,
           "choice_no_replacement: needs the example's id to count its visits: no key '_id'")
  T.raises(function() run(spec, {id = "1", t = {}}) end,
           "choice_no_replacement: key 't' has no items to choose from")
  T.raises(function() run(spec, {id = "1", t = bv.tensor(3)}) end, "key 't' is a scalar")
  T.raises(function() run(spec, {id = "1", t = "abc"}) end, "key 't': cannot choose from a string")
  T.raises(function() run(spec, {id = "1"}) end, "no key 't' in the example")
  T.raises(function()
    run("choice_no_replacement(key=['a', 'b'])", {id = "1", a = {1}, b = {1, 2}})
  end, "keys have different numbers of items (a: 1, b: 2)")
  T.raises(function() run(spec, {id = {}, t = {1}}) end, "key 'id' must hold a string or number id")
  T.raises(function() pp.build("choice_no_replacement()") end, "give key or inkey/outkey")
  T.raises(function() pp.build("choice_no_replacement(inkey='a')") end, "give key or inkey/outkey")
  T.raises(function() pp.build("choice_no_replacement(n=2, key='a')") end,
           "unexpected keyword argument 'n'")
end)

-- coco_captions --------------------------------------------------------------------------------

T.test("coco_captions: captions/text to outkey", function()
  local out = run("coco_captions", {captions = {text = {"a dog", "a cat"}, id = {1, 2}}})
  T.eq(out.captions, {"a dog", "a cat"})
  out = run("coco_captions(outkey='texts')", {captions = {text = {}}})
  T.eq(out.texts, {}); T.eq(out.captions, {text = {}})
  T.raises(function() run("coco_captions", {image = 1}) end, "no key 'captions' in the example")
  T.raises(function() run("coco_captions", {captions = {"a dog"}}) end,
           "coco_captions: key 'captions' must hold a table with a 'text' entry")
end)

-- clip_i1k_label_names, i21k_label_names -------------------------------------------------------

local function names_file(name, n)
  local lines = {}
  for i = 0, n - 1 do lines[#lines + 1] = "class " .. i end
  return write(name, table.concat(lines, "\n") .. "\n")
end

T.test("clip_i1k_label_names / i21k_label_names: label ids to names from the file", function()
  local i1k = names_file("clip_i1k.txt", 1000)
  local spec = string.format("clip_i1k_label_names(file='%s')", i1k)
  local out = run(spec, {label = 7})
  T.eq(out.labels, "class 7"); T.eq(out.label, 7)
  T.eq(run(spec, {label = bv.tensor(999)}).labels, "class 999")
  T.eq(run(spec, {label = bv.tensor({0, 3, 3})}).labels, {"class 0", "class 3", "class 3"})
  T.eq(run(spec, {label = bv.tensor({}, "int64")}).labels, {})
  T.eq(run(spec:gsub("%)$", ", inkey='y', outkey='y')"), {y = {{1}, {2}}}).y,
       {{"class 1"}, {"class 2"}})
  local i21k = names_file("i21k.txt", 21843)
  T.eq(run(string.format("i21k_label_names(file='%s')", i21k), {label = 21842}).labels,
       "class 21842")
end)

T.test("clip_i1k_label_names: the file may come from BV_CLIP_I1K_LABEL_NAMES", function()
  local i1k = names_file("env_i1k.txt", 1000)
  local p = io.popen(string.format("BV_CLIP_I1K_LABEL_NAMES='%s' build/bvlua -e %q 2>&1", i1k,
    "print(bv.pp.build('clip_i1k_label_names')({label = 12}, bv.rng(0)).labels)"))
  local got = p:read("a")
  p:close()
  T.eq(got, "class 12\n")
end)

T.test("label names: errors name the op, the file, the variable and big_vision's list", function()
  T.raises(function() pp.build("clip_i1k_label_names(file=None)") end,
           "clip_i1k_label_names: no class-name file: pass file='names.txt' or set "
           .. "BV_CLIP_I1K_LABEL_NAMES")
  local msg = T.raises(function() pp.build("i21k_label_names(file='" .. tmp .. "/no.txt')") end,
                       "i21k_label_names: class-name file '" .. tmp .. "/no.txt' does not exist")
  T.truthy(msg:find("IMAGENET21k_CLASS_NAMES in big_vision/datasets/imagenet/class_names.py", 1,
                    true), msg)
  local short = names_file("short.txt", 999)
  T.raises(function() pp.build(string.format("clip_i1k_label_names(file='%s')", short)) end,
           "has 999 names, big_vision's CLIP_IMAGENET_CLASS_NAMES has 1000")
  local spec = string.format("clip_i1k_label_names(file='%s')", names_file("ok.txt", 1000))
  T.raises(function() run(spec, {label = 1000}) end, "label 1000 is outside [0, 1000)")
  T.raises(function() run(spec, {label = -1}) end, "label -1 is outside [0, 1000)")
  T.raises(function() run(spec, {label = bv.tensor(1.5)}) end, "labels must be integers")
  T.raises(function() run(spec, {image = 1}) end, "no key 'label' in the example")
end)

-- strjoin, majority, getidx (PaliGemma) --------------------------------------------------------

T.test("strjoin: all strings (axis=None) or along an axis", function()
  T.eq(run("strjoin(', ', key='a')", {a = {"x", "y", "z"}}).a, "x, y, z")
  T.eq(run("strjoin('\\n', inkey='a', outkey='s')", {a = {"x"}}).s, "x")
  T.eq(run("strjoin('-', key='a')", {a = {}}).a, "")
  T.eq(run("strjoin('-', key='a')", {a = "solo"}).a, "solo")
  T.eq(run("strjoin('', key='a')", {a = {{"a", "b"}, {"c", "d"}}}).a, "abcd")
  T.eq(run("strjoin('+', key='a', axis=0)", {a = {{"a", "b"}, {"c", "d"}}}).a, {"a+c", "b+d"})
  T.eq(run("strjoin('+', key='a', axis=-1)", {a = {{"a", "b"}, {"c", "d"}}}).a, {"a+b", "c+d"})
  T.eq(run("strjoin('+', key='a', axis=0)", {a = {"a", "b"}}).a, "a+b")
  T.raises(function() run("strjoin('+', key='a', axis=2)", {a = {{"a"}}}) end,
           "strjoin: axis 2 is out of range for 2-D strings")
  T.raises(function() run("strjoin('+', key='a')", {a = {"a", 1}}) end,
           "strjoin: expected strings, got a number")
  T.raises(function() run("strjoin('+', key='a')", {a = {{"a"}, "b"}}) end, "not rectangular")
  T.raises(function() run("strjoin('+', key='a', axis=0)", {a = {{"a"}, {"b", "c"}}}) end,
           "not rectangular")
  T.raises(function() pp.build("strjoin(1, key='a')") end, "strjoin: glue must be a string")
  T.raises(function() pp.build("strjoin(key='a')") end, "missing required argument 'glue'")
  T.raises(function() run("strjoin('+', key='a')", {b = {}}) end, "no key 'a' in the example")
end)

T.test("majority: the most common value, ties to the first seen", function()
  T.eq(run("majority(key='a')", {a = {"no", "yes", "yes", "no", "maybe", "yes"}}).a, "yes")
  T.eq(run("majority(key='a')", {a = {"b", "a", "a", "b"}}).a, "b")
  T.eq(run("majority(inkey='a', outkey='m')", {a = {"only"}}).m, "only")
  local t = run("majority(key='a')", {a = bv.tensor({3, 1, 1, 3, 1}, "int32")}).a
  T.eq(t:dim(), 0); T.eq(t:dtype(), "int32"); T.eq(t:item(), 1)
  T.raises(function() run("majority(key='a')", {a = {}}) end, "majority: there are no values")
  T.raises(function() run("majority(key='a')", {a = "abc"}) end,
           "majority: expected a 1-D tensor or list, got a string")
  T.raises(function() run("majority(key='a')", {a = bv.tensor({{1}})}) end, "got a 2-D tensor")
  T.raises(function() run("majority(key='a')", {}) end, "no key 'a' in the example")
end)

T.test("getidx: data[inkey][data[index_key]] with Python's indices", function()
  local ex = function() return {ans = {"red", "green", "blue"}, idx = 1, t = bv.tensor({5, 6})} end
  local out = run("getidx('ans', 'idx', outkey='answer')", ex())
  T.eq(out.answer, "green"); T.eq(out.ans, {"red", "green", "blue"})
  T.eq(run("getidx('ans', 'idx')", ex()).ans, "green")
  local e = ex(); e.idx = -1
  T.eq(run("getidx('ans', 'idx')", e).ans, "blue")
  e = ex(); e.idx = bv.tensor(0, "int32")
  T.eq(run("getidx('ans', 'idx')", e).ans, "red")
  e = ex(); e.idx = bv.tensor(1)
  T.eq(run("getidx('t', 'idx', outkey='x')", e).x:item(), 6)
  e = ex(); e.idx = 3
  T.raises(function() run("getidx('ans', 'idx')", e) end,
           "getidx: index 3 (key 'idx') is out of range for 3 items")
  e = ex(); e.idx = -4
  T.raises(function() run("getidx('ans', 'idx')", e) end, "index -4 (key 'idx') is out of range")
  e = ex(); e.ans = {}; e.idx = 0
  T.raises(function() run("getidx('ans', 'idx')", e) end, "out of range for 0 items")
  e = ex(); e.idx = 0.5
  T.raises(function() run("getidx('ans', 'idx')", e) end, "key 'idx' must hold an integer index")
  T.raises(function() run("getidx('ans', 'nope')", ex()) end, "no key 'nope' in the example")
  T.raises(function() run("getidx('nope', 'idx')", ex()) end, "no key 'nope' in the example")
  e = ex(); e.ans = "red"
  T.raises(function() run("getidx('ans', 'idx')", e) end, "key 'ans' must hold a list or tensor")
  T.raises(function() pp.build("getidx('ans')") end, "missing required argument 'index_key'")
end)

T.run()
