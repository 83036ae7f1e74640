-- pp ops that tokenize: big_vision's `tokenize` (lib/bv/pp/ops_text.lua; its doc string's eos
-- none/yes/sticky examples), PaliGemma's `tok`, `tolen`, `masked_concat`
-- (lib/bv/pp/proj/paligemma/ops.lua), and the pp strings of
-- bv.paligemma.combine_and_keep_train/eval on hand-made prefixes and suffixes: which ids come out,
-- which positions attend to which (big_vision's prefix-LM rule on mask_ar), and which targets
-- carry loss. Loc/seg tokens have known ids (base vocabulary + k), so the expected sequences
-- below are written out by hand.
local T = require "tests.lua.lib.testing"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local LINES = {
  "a cat sat on the mat", "the dog ate the bone", "a bird in the hand is worth two in the bush",
  "the quick brown fox jumps over the lazy dog", "caption en", "answer en what is this",
  "a photo of a cat", "two dogs play in the park", "the sky is blue and the grass is green",
}
local V = 50
local MODEL = bv.text.train_sentencepiece{lines = LINES, vocab_size = V, gemma_like = true,
                                          path = tmp .. "/gemma_like.model"}
local SPEC = "gemma(tokensets=('loc', 'seg'), model='" .. MODEL .. "')"
local tok = bv.text.tokenizer(SPEC)
local plain = bv.text.tokenizer("sp(model='" .. MODEL .. "')")
local PAD, EOS, BOS, UNK = 0, 1, 2, 3
local NL = tok:piece_to_id("\n")
local function loc(k) return V + k end
local function seg(k) return V + 1024 + k end

local function run(pp, data, seed)
  return bv.pp.build(pp)(data, bv.rng(seed or 0))
end

local function ids(t)
  T.truthy(bv.is_tensor(t), "expected a tensor, got " .. type(t))
  return t:to("int64"):totable()
end

local function cat(...)
  local out = {}
  for _, list in ipairs({...}) do
    for _, v in ipairs(list) do out[#out + 1] = v end
  end
  return out
end

local function quote(s) return "'" .. s .. "'" end
local function dquote(s) return '"' .. s .. '"' end

T.test("the test model: Gemma's special ids, a newline token, loc/seg after the vocab", function()
  T.eq({tok.pad_token, tok.eos_token, tok.bos_token, tok.unk_token}, {PAD, EOS, BOS, UNK})
  T.eq(tok:to_int("\n"), {NL})
  T.eq(tok:to_int("<loc0001><seg003>"), {loc(1), seg(3)})
end)

-- ---------------------------------------------------------------------------------------------
-- tokenize (big_vision's doc string: max_len=3, "a"/"aa"/"aaa", eos none/yes/sticky)

T.test("tokenize: eos='none' truncates and pads", function()
  local t = plain:to_int("a cat sat")
  local n = #t
  T.truthy(n >= 3)
  local function go(max_len, pad)
    local op = string.format("tokenize(%d, 'none', model=%s, inkey='text'%s)", max_len,
                             quote(MODEL), pad and (", pad_value=" .. pad) or "")
    return run(op, {text = "a cat sat"}).labels
  end
  local out = go(n + 2)
  T.eq(out:dtype(), "int32")
  T.eq(ids(out), cat(t, {PAD, PAD}))            -- "<pad>" is id 0 in a Gemma-like model
  T.eq(ids(go(n)), t)
  T.eq(ids(go(n - 1)), {table.unpack(t, 1, n - 1)})
  T.eq(ids(go(n + 1, 7)), cat(t, {7}))
end)

T.test("tokenize: eos='yes' appends eos, which a cut may drop", function()
  local t = plain:to_int("a cat sat")
  local n = #t
  local function go(max_len)
    return ids(run(string.format("tokenize(%d, 'yes', model=%s, key='text')", max_len,
                                 quote(MODEL)), {text = "a cat sat"}).text)
  end
  T.eq(go(n + 2), cat(t, {EOS, PAD}))
  T.eq(go(n + 1), cat(t, {EOS}))
  T.eq(go(n), t)
end)

T.test("tokenize: eos='sticky' keeps the eos when cutting", function()
  local t = plain:to_int("a cat sat")
  local n = #t
  local function go(max_len, pad)
    return ids(run(string.format("tokenize(%d, 'sticky', model=%s, inkey='text', pad_value=%d)",
                                 max_len, quote(MODEL), pad), {text = "a cat sat"}).labels)
  end
  T.eq(go(n + 2, 0), cat(t, {EOS, 0}))
  T.eq(go(n + 1, 0), cat(t, {EOS}))
  T.eq(go(n, 0), cat({table.unpack(t, 1, n - 1)}, {EOS}))
  T.eq(go(n + 2, 1), cat(t, {EOS, 1}))           -- the doc string's pad_value=1 case
end)

T.test("tokenize: add_bos, lower, several texts", function()
  local t = plain:to_int("a cat")
  local op = "tokenize(6, 'yes', model=" .. quote(MODEL) .. ", inkey='text', add_bos=True)"
  T.eq(ids(run(op, {text = "a cat"}).labels), cat({BOS}, t, {EOS}, {PAD, PAD}))
  -- lower=True (the default) lower-cases first; uppercase is unknown to this model.
  local low = "tokenize(4, 'none', model=" .. quote(MODEL) .. ", inkey='text')"
  T.eq(ids(run(low, {text = "A CAT"}).labels), ids(run(low, {text = "a cat"}).labels))
  local keep = "tokenize(4, 'none', model=" .. quote(MODEL) .. ", inkey='text', lower=False)"
  local kept = ids(run(keep, {text = "A CAT"}).labels)
  T.truthy(kept[1] == UNK or kept[2] == UNK, "upper case stays: " .. table.concat(kept, ","))
  -- sample_if_multi=True: one of the texts, drawn from the example's random stream.
  local texts = {"a cat", "the dog"}
  local want = {}
  for i, s in ipairs(texts) do want[i] = ids(run(low, {text = s}).labels) end
  local seen = {}
  for seed = 1, 20 do
    local got = ids(run(low, {text = texts}, seed).labels)
    local which = T.deep_eq(got, want[1]) and 1 or T.deep_eq(got, want[2]) and 2 or nil
    T.truthy(which, "one of the texts: " .. table.concat(got, ","))
    seen[which] = true
    T.eq(ids(run(low, {text = texts}, seed).labels), got, "same seed, same choice")
  end
  T.truthy(seen[1] and seen[2], "both texts get picked")
  T.eq(ids(run(low, {text = {}}).labels), {PAD, PAD, PAD, PAD})  -- setdefault("")
  -- sample_if_multi=False: all of them, [n, max_len].
  local all = run("tokenize(4, 'none', model=" .. quote(MODEL) .. ", inkey='text', "
                  .. "sample_if_multi=False)", {text = texts}).labels
  T.eq(all:shape(), {2, 4})
  T.eq(ids(all[1]), want[1])
  T.eq(ids(all[2]), want[2])
end)

T.test("tokenize: errors", function()
  local m = quote(MODEL)
  T.raises(function() run("tokenize(4, 'maybe', model=" .. m .. ", inkey='t')", {t = "a"}) end,
           "invalid value for eos: 'maybe'")
  T.raises(function() run("tokenize(4, 'yes', model=" .. m .. ")", {text = "a"}) end,
           "needs key= or inkey=")
  T.raises(function() run("tokenize(4, 'yes', inkey='t')", {t = "a"}) end,
           "gs://t5-data/vocabs/cc_en.32000/sentencepiece.model")
  T.raises(function() run("tokenize(4, 'yes', model='" .. tmp .. "/none.model', inkey='t')",
                          {t = "a"}) end, tmp .. "/none.model")
end)

-- ---------------------------------------------------------------------------------------------
-- tolen, tok, masked_concat

T.test("tolen: cut, sticky cut, pad from a value or a key", function()
  local x = bv.tensor({11, 12, 13, 14, 15}, "int32")
  local function go(op, data)
    data = data or {}
    data.x = x
    return run(op, data).x
  end
  T.eq(ids(go("tolen(3, pad_value=0, key='x')")), {11, 12, 13})
  T.eq(ids(go("tolen(3, sticky_end=True, pad_value=0, key='x')")), {11, 12, 15})
  T.eq(ids(go("tolen(1, sticky_end=True, pad_value=0, key='x')")), {15})
  T.eq(ids(go("tolen(5, pad_value=0, key='x')")), {11, 12, 13, 14, 15})
  T.eq(ids(go("tolen(7, pad_value=9, key='x')")), {11, 12, 13, 14, 15, 9, 9})
  T.eq(go("tolen(7, pad_value=9, key='x')"):dtype(), "int32")
  T.eq(ids(go("tolen(6, pad_key='p', key='x')", {p = bv.tensor({4, 5})})), {11, 12, 13, 14, 15, 4})
  T.eq(ids(go("tolen(6, pad_key='p', key='x')", {p = bv.tensor(8)})), {11, 12, 13, 14, 15, 8})
  T.eq(ids(go("tolen(None, key='x')")), {11, 12, 13, 14, 15})
  T.eq(ids(go("tolen(0, key='x')")), {11, 12, 13, 14, 15})
  local out = run("tolen(4, pad_value=-1, inkey='x', outkey='y')", {x = bv.tensor({1, 2})})
  T.eq(ids(out.y), {1, 2, -1, -1})
  T.eq(out.y:dtype(), "int64")
  T.eq(ids(out.x), {1, 2})
  T.raises(function() go("tolen(7, key='x')") end, "needs either pad_value or pad_key")
  -- As in big_vision (an assert before the cut/pad choice), even when only cutting.
  T.raises(function() go("tolen(3, key='x')") end, "needs either pad_value or pad_key")
  T.raises(function() run("tolen(3, key='x')", {x = bv.zeros({2, 2})}) end, "1-D tensor")
end)

T.test("tok: bos/eos, length, sticky, constant text", function()
  local a_cat = plain:to_int("a cat")
  local n = #a_cat
  local function go(args, data)
    return run("tok(model=" .. dquote(SPEC) .. ", " .. args .. ")", data or {s = "a cat"})
  end
  local out = go("key='s'").s
  T.eq(out:dtype(), "int32")
  T.eq(ids(out), a_cat)
  T.eq(ids(go("key='s', bos='yes', eos='yes'").s), cat({BOS}, a_cat, {EOS}))
  T.eq(ids(go("inkey='s', outkey='t', eos='yes'").t), cat(a_cat, {EOS}))
  T.eq(ids(go(string.format("length=%d, key='s', bos='yes', eos='yes'", n + 4)).s),
       cat({BOS}, a_cat, {EOS}, {PAD, PAD}))
  T.eq(ids(go(string.format("length=%d, key='s', bos='yes', eos='yes'", n)).s),
       cat({BOS}, {table.unpack(a_cat, 1, n - 1)}))
  T.eq(ids(go(string.format("length=%d, key='s', bos='yes', eos='sticky'", n)).s),
       cat({BOS}, {table.unpack(a_cat, 1, n - 2)}, {EOS}))
  T.eq(ids(go("key='s'", {s = "<loc0100><seg000>"}).s), {loc(100), seg(0)})
  T.eq(ids(go("key='s'", {s = ""}).s), {})
  -- A constant: tokenized once, the same for every example, each with its own tensor.
  local f = bv.pp.build("tok(model=" .. dquote(SPEC) .. ", key='sep', text='\\n')")
  local e1, e2 = f({}, bv.rng(0)), f({}, bv.rng(1))
  T.eq(ids(e1.sep), {NL})
  e1.sep:fill_(77)
  T.eq(ids(e2.sep), {NL})
  T.eq(ids(go("key='c', text='<loc0001>', length=3, bos='yes', eos='yes'").c), {BOS, loc(1), EOS})
  T.eq(ids(go("key='c', text='<loc0001><loc0002>', length=3, bos='yes', eos='sticky'").c),
       {BOS, loc(1), EOS})
  T.eq(ids(go("key='c', text='<loc0001>', length=5").c), {loc(1), PAD, PAD, PAD, PAD})
end)

T.test("tok: errors", function()
  local m = "model=" .. dquote(SPEC)
  T.raises(function() run("tok(" .. m .. ", key='s', eos='maybe')", {s = "a"}) end,
           "eos must be one of no, yes, sticky")
  T.raises(function() run("tok(" .. m .. ", key='s', bos='sticky')", {s = "a"}) end,
           "bos must be one of no, yes")
  T.raises(function() run("tok(" .. m .. ", inkey='s', outkey='t', text='x')", {s = "a"}) end,
           "either inkey or text")
  T.raises(function() run("tok(" .. m .. ", key='s')", {s = {"a", "b"}}) end,
           "can only tokenize a single string ('s' holds a table)")
  T.raises(function() run("tok(" .. m .. ", key='s')", {}) end, "no key 's'")
  T.raises(function() run("tok(model='nope', key='s')", {s = "a"}) end, "unknown tokenizer 'nope'")
end)

T.test("masked_concat: concatenation and one mask value per key", function()
  local data = {a = bv.tensor({1, 2}, "int32"), b = bv.tensor({3}, "int32"),
                c = bv.tensor({4, 5, 6}, "int32"), e = bv.tensor({}, "int32")}
  local out = run("masked_concat(['a', 'b', 'e', 'c'], mask_ar=[0, 0, 0, 1], "
                  .. "mask_loss=[0, 1, 1, 1], weight=[0.5, 1.0, 0.0, 2.0])", data)
  T.eq(ids(out.text), {1, 2, 3, 4, 5, 6})
  T.eq(ids(out.mask_ar), {0, 0, 0, 1, 1, 1})
  T.eq(out.mask_ar:dtype(), "int32")
  T.eq(ids(out.mask_loss), {0, 0, 1, 1, 1, 1})
  T.eq(out.weight:dtype(), "float32")
  T.eq(out.weight:totable(), {0.5, 0.5, 1.0, 2.0, 2.0, 2.0})
  -- outkey may be one of the inputs: every input is read first.
  local same = run("masked_concat(['a', 'c'], outkey='a', m=[1, 0])",
                   {a = bv.tensor({1, 2}, "int32"), c = bv.tensor({4}, "int32")})
  T.eq(ids(same.a), {1, 2, 4})
  T.eq(ids(same.m), {1, 1, 0})
  T.raises(function() run("masked_concat(['a', 'b'], m=[1])", data) end,
           "mask 'm' needs one value per key (2)")
  T.raises(function() run("masked_concat(['a', 'zz'])", data) end, "no key 'zz'")
end)

-- ---------------------------------------------------------------------------------------------
-- combine_and_keep_train / combine_and_keep_eval

-- big_vision's prefix-LM rule (models/ppp/gemma.py make_attn_mask): with c = cumsum(mask_ar),
-- position i may attend to position j when c[j] <= c[i] (and j is real input).
local function attends(mask_ar, input_mask)
  local c, sum = {}, 0
  for i, m in ipairs(mask_ar) do
    sum = sum + m
    c[i] = sum
  end
  return function(i, j) return c[j] <= c[i] and (not input_mask or input_mask[j] == 1) end
end

T.test("combine_and_keep_train: the pp string is big_vision's", function()
  local s = bv.paligemma.combine_and_keep_train{text_len = 8, before = {"decode"}}
  T.eq(s, "decode"
    .. "|tok(key='prefix', bos='yes', model='gemma(tokensets=(\"loc\", \"seg\"))')"
    .. "|tok(key='suffix', eos='yes', model='gemma(tokensets=(\"loc\", \"seg\"))')"
    .. "|tok(key='septok', text='\\n', model='gemma(tokensets=(\"loc\", \"seg\"))')"
    .. '|masked_concat(["prefix", "septok", "suffix"], outkey="text", mask_ar=[0, 0, 1], '
    .. 'mask_loss=[0, 0, 1])'
    .. '|tolen(9, pad_value=0, key="text")|tolen(9, pad_value=1, key="mask_ar")'
    .. '|tolen(9, pad_value=0, key="mask_loss")|keep("image", "text", "mask_ar", "mask_loss")')
  T.eq(bv.paligemma.combine_and_keep_train(8), bv.paligemma.combine_and_keep_train{text_len = 8})
  T.raises(function() bv.paligemma.combine_and_keep_train{} end, "text_len must be a positive")
  T.raises(function() bv.paligemma.combine_and_keep_train{text_len = 8, sepp = "x"} end,
           "unknown option 'sepp'")
end)

T.test("combine_and_keep_train: text, masks, attention and loss on a hand-made example", function()
  local pp = bv.paligemma.combine_and_keep_train{text_len = 8, model = SPEC}
  local ex = run(pp, {image = bv.zeros({2, 2, 3}), prefix = "<loc0001><loc0002>",
                      suffix = "<seg003>", other = "dropped"})
  T.eq(ex.other, nil)
  T.truthy(ex.image ~= nil)
  -- [bos p1 p2 \n | s1 eos | pad pad pad]: text_len + 1 = 9 ids.
  local text, ar, loss = ids(ex.text), ids(ex.mask_ar), ids(ex.mask_loss)
  T.eq(text, {BOS, loc(1), loc(2), NL, seg(3), EOS, PAD, PAD, PAD})
  T.eq(ar,   {0,   0,      0,      0,  1,      1,   1,   1,   1})
  T.eq(loss, {0,   0,      0,      0,  1,      1,   0,   0,   0})
  for _, k in ipairs({"text", "mask_ar", "mask_loss"}) do T.eq(ex[k]:dtype(), "int32", k) end

  -- The model sees text[1..8] with mask_ar[1..8]: the prefix (bos, p1, p2, \n) attends to
  -- itself in both directions, never to the suffix; the suffix is causal.
  local can = attends({table.unpack(ar, 1, 8)})
  for i = 1, 4 do
    for j = 1, 4 do T.truthy(can(i, j), string.format("prefix %d sees prefix %d", i, j)) end
    for j = 5, 8 do T.truthy(not can(i, j), string.format("prefix %d blind to %d", i, j)) end
  end
  for i = 5, 8 do
    for j = 1, 8 do
      T.eq(can(i, j), j <= i, string.format("suffix position %d -> %d is causal", i, j))
    end
  end
  -- Targets are text[2..9] weighted by mask_loss[2..9]: exactly the suffix token and eos.
  local supervised = {}
  for i = 2, 9 do
    if loss[i] == 1 then supervised[#supervised + 1] = text[i] end
  end
  T.eq(supervised, {seg(3), EOS})
end)

T.test("combine_and_keep_train: long texts are cut plainly (eos may go)", function()
  local function go(text_len)
    local pp = bv.paligemma.combine_and_keep_train{text_len = text_len, model = SPEC}
    local ex = run(pp, {image = 0, prefix = "<loc0001><loc0002>", suffix = "<seg003><seg004>"})
    return ids(ex.text), ids(ex.mask_ar), ids(ex.mask_loss)
  end
  local text, ar, loss = go(6)
  T.eq(text, {BOS, loc(1), loc(2), NL, seg(3), seg(4), EOS})
  T.eq(ar, {0, 0, 0, 0, 1, 1, 1})
  T.eq(loss, {0, 0, 0, 0, 1, 1, 1})
  text, ar, loss = go(4)
  T.eq(text, {BOS, loc(1), loc(2), NL, seg(3)})
  T.eq(ar, {0, 0, 0, 0, 1})
  T.eq(loss, {0, 0, 0, 0, 1})
  text, ar, loss = go(2)  -- even the prefix is cut
  T.eq(text, {BOS, loc(1), loc(2)})
  T.eq(ar, {0, 0, 0})
  T.eq(loss, {0, 0, 0})
end)

T.test("combine_and_keep_eval: prompt, optional suffix without eos, mask_input", function()
  local s = bv.paligemma.combine_and_keep_eval{text_len = 6, model = SPEC, keep = {"question_id"}}
  T.truthy(s:find('setdefault("suffix", "")', 1, true), s)
  T.truthy(s:find("tok(key='suffix', eos='no', model=", 1, true), s)
  T.truthy(s:find('keep("image", "text", "mask_ar", "mask_input", "question_id")', 1, true), s)
  local ex = run(s, {image = 0, prefix = "<loc0001><loc0002>", question_id = 7, answer = "x"})
  T.eq(ex.answer, nil)
  T.eq(ex.question_id, 7)
  T.eq(ids(ex.text), {BOS, loc(1), loc(2), NL, PAD, PAD})
  T.eq(ids(ex.mask_ar), {0, 0, 0, 0, 1, 1})
  T.eq(ids(ex.mask_input), {1, 1, 1, 1, 0, 0})
  -- A given suffix is kept, without eos, so decoding continues from it.
  ex = run(s, {image = 0, prefix = "<loc0001><loc0002>", suffix = "<seg003>"})
  T.eq(ids(ex.text), {BOS, loc(1), loc(2), NL, seg(3), PAD})
  T.eq(ids(ex.mask_ar), {0, 0, 0, 0, 1, 1})
  T.eq(ids(ex.mask_input), {1, 1, 1, 1, 1, 0})
  -- Padding is invisible to every position; the prompt is fully visible inside itself.
  local can = attends(ids(ex.mask_ar), ids(ex.mask_input))
  for i = 1, 6 do T.truthy(not can(i, 6), "nobody sees the padding") end
  T.truthy(can(1, 4) and can(4, 1) and not can(4, 5) and can(5, 4))
end)

T.test("paligemma: sep, before and the repr of generated arguments", function()
  local s = bv.paligemma.combine_and_keep_train{text_len = 9, model = SPEC, sep = "<loc0009>",
                                                before = "strfmt('caption en', outkey='prefix')"}
  T.truthy(s:find("^strfmt%('caption en', outkey='prefix'%)|tok%("), s)
  local ex = run(s, {image = 0, suffix = "<seg001>"})
  T.eq(ids(ex.text), cat({BOS}, tok:to_int("caption en"), {loc(9), seg(1), EOS}))
  T.eq(bv.paligemma.repr("it's \"q\"\n\1"), [['it\'s "q"\n\x01']])
  T.eq(bv.paligemma.repr({1, 2.5, true, "a"}), "[1, 2.5, True, 'a']")
  T.eq(bv.paligemma.repr(nil), "None")
  T.eq(bv.paligemma.tok{key = "x", length = 3, model = "sp"}, "tok(key='x', length=3, model='sp')")
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
