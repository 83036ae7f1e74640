-- bv.text: big_vision's tokenizer API (pp/tokenizer.py, SentencepieceTokenizer) on small
-- SentencePiece models trained here. The cases follow big_vision's pp/ops_text_test.py where they
-- apply (its test model has bos 1, eos 2 and no pad, like SentencePiece's defaults used by
-- `default.model` below); ids are taken from the model, so the checks are about the rules.
local T = require "tests.lua.lib.testing"

local tmp = os.tmpname()
os.remove(tmp)
bv.fs.mkdirs(tmp)

local LINES = {
  "a cat sat on the mat", "the dog ate the bone", "a bird in the hand is worth two in the bush",
  "the quick brown fox jumps over the lazy dog", "caption en", "answer en what is this",
  "a photo of a cat", "two dogs play in the park", "the sky is blue and the grass is green",
  "blah blah blah",
}
local V = 50

local default_path = bv.text.train_sentencepiece{lines = LINES, vocab_size = V,
                                                  path = tmp .. "/default.model"}
local gemma_path = bv.text.train_sentencepiece{lines = LINES, vocab_size = V, gemma_ids = true,
                                                path = tmp .. "/gemma.model"}

local function sp(path, tokensets)
  local spec = "sp(model='" .. path .. "'" .. (tokensets and (", tokensets=" .. tokensets) or "")
  return bv.text.tokenizer(spec .. ")")
end

local function cat(...)
  local out = {}
  for _, list in ipairs({...}) do
    for _, v in ipairs(list) do out[#out + 1] = v end
  end
  return out
end

T.test("special tokens and vocabulary size", function()
  local tok = sp(default_path)
  T.eq(tok.vocab_size, V)
  T.eq(tok.bos_token, 1)
  T.eq(tok.eos_token, 2)
  T.eq(tok.pad_token, -1)  -- SentencePiece's default: no pad piece
  local g = sp(gemma_path)
  T.eq({g.pad_token, g.eos_token, g.bos_token, g.unk_token}, {0, 1, 2, 3})
  T.eq(g:to_piece(1), "<eos>")
end)

T.test("to_int: bos and eos rules", function()
  local tok = sp(default_path)
  local blah = tok:to_int("blah")
  T.truthy(#blah > 0)
  T.eq(tok:to_int("blah", {bos = true}), cat({1}, blah))
  T.eq(tok:to_int("blah", {eos = true}), cat(blah, {2}))
  T.eq(tok:to_int("blah", {bos = true, eos = true}), cat({1}, blah, {2}))
  T.eq(tok:to_int("blah", {bos = false, eos = false}), blah)
  T.eq(tok:to_int({"blah", "blah blah"}), {blah, tok:to_int("blah blah")})
  T.eq(#tok:to_int("blah blah"), 2 * #blah)
  T.eq(tok:to_int({"blah"}, {eos = true}), {cat(blah, {2})})
  T.eq(tok:to_int(""), {})
  T.raises(function() tok:to_int(42) end, "expected a string or a list of strings")
  T.raises(function() tok:to_int({"a", 3}) end, "text[2] is a number")
end)

T.test("to_str: control tokens vanish, lists and tensors", function()
  local tok = sp(default_path)
  local blah = tok:to_int("blah")
  T.eq(tok:to_str(blah), "blah")
  T.eq(tok:to_str(cat({1}, blah)), "blah")
  T.eq(tok:to_str(cat(blah, {2})), "blah")
  local two = tok:to_int("blah blah")
  T.eq(tok:to_str({blah, two}), {"blah", "blah blah"})
  -- big_vision's to_str_tf_op case: an int32 [2, n] array of [bos, blah, eos] rows.
  local row = cat({1}, blah, {2})
  T.eq(tok:to_str(bv.tensor({row, row}, "int32")), {"blah", "blah"})
  T.eq(tok:to_str(bv.tensor(row)), "blah")
  T.eq(tok:to_str({}), "")
  T.raises(function() tok:to_str({1.5}) end, "not an integer id")
  T.raises(function() tok:to_str({V + 7}) end, "token id 57")
end)

T.test("to_str: stop_at_eos", function()
  -- big_vision: [80, 2, 180, 60] ("blah" with eos after its first piece) gives "blah" without
  -- stop_at_eos (SentencePiece drops the eos) and "b" with it; [80, 180, 2, 60] gives "bla".
  local tok = sp(default_path)
  local ids = tok:to_int("the sky is blue")
  T.truthy(#ids >= 3, "needs several pieces")
  local head1, head2 = tok:to_str({ids[1]}), tok:to_str({ids[1], ids[2]})
  local after1 = cat({ids[1]}, {2}, {table.unpack(ids, 2)})
  local after2 = cat({ids[1], ids[2]}, {2}, {table.unpack(ids, 3)})
  T.eq(tok:to_str(ids, {stop_at_eos = false}), "the sky is blue")
  T.eq(tok:to_str(after1, {stop_at_eos = false}), "the sky is blue")
  T.eq(tok:to_str(after1, {stop_at_eos = true}), head1)
  T.eq(tok:to_str(after1), head1)  -- stop_at_eos defaults to true
  T.eq(tok:to_str({after1, after2}, {stop_at_eos = true}), {head1, head2})
  T.eq(tok:to_str(bv.tensor({after1, after1}, "int32")), {head1, head1})
  T.truthy(#head1 < #head2 and #head2 < #"the sky is blue", "prefixes: " .. head1 .. "|" .. head2)
  T.eq(tok:to_str({2}), "")
end)

T.test("tokensets: loc and seg after the base vocabulary", function()
  local tok = sp(default_path, "('loc',)")
  T.eq(tok.vocab_size, V + 1024)
  local blah = tok:to_int("blah")
  T.eq(tok:to_int("blah<loc0000><loc1023>"), cat(blah, {V, V + 1023}))
  local both = sp(gemma_path, "('loc', 'seg')")
  T.eq(both.vocab_size, V + 1152)
  T.eq(both:piece_to_id("<seg000>"), V + 1024)
  T.eq(both:to_str(both:to_int("a cat <loc0100><seg007>")), "a cat <loc0100><seg007>")
  -- The spec's tokensets argument can be positional for gemma (tokensets first), and a list.
  T.eq(#bv.text.tokenset("seg"), 128)
  T.raises(function() sp(default_path, "('boxes',)") end, "unknown tokenset 'boxes'")
end)

T.test("tokensets: extra pieces the model already has (big_vision's sp_extra_tokens)", function()
  bv.text.register_tokenset("sp_extra_tokens", {"<s>", "</s>", "<pad>"})
  local plain = sp(default_path)
  local extra = sp(default_path, "('sp_extra_tokens',)")
  local blah = plain:to_int("blah")
  T.eq(plain:to_str(cat({1}, blah, {2}), {stop_at_eos = false}), "blah")
  T.eq(extra.vocab_size, V + 1)  -- only <pad> is new
  T.eq(extra:to_str(cat({1}, blah, {2}), {stop_at_eos = false}), "<s> blah</s>")
end)

T.test("specs: parsing, binding, caching", function()
  local a = sp(default_path)
  T.truthy(rawequal(a, sp(default_path)), "the same spec gives the cached object")
  local g = bv.text.tokenizer("gemma(model='" .. gemma_path .. "')")
  T.eq(g.vocab_size, V)
  local g2 = bv.text.tokenizer("gemma(('loc', 'seg'), '" .. gemma_path .. "')")
  T.eq(g2.vocab_size, V + 1152)
  local g3 = bv.text.tokenizer('gemma(tokensets=("loc", "seg"))', {path = gemma_path})
  T.eq(g3.vocab_size, V + 1152)
  T.raises(function() bv.text.tokenizer("bpe(model='x')") end, "unknown tokenizer 'bpe'")
  T.raises(function() bv.text.tokenizer("sp") end, "missing argument 'model'")
  T.raises(function() bv.text.tokenizer("sp(model='x', size=3)") end, "unknown argument 'size'")
  T.raises(function() bv.text.tokenizer("sp(model=") end, "bad spec")
  T.raises(function() bv.text.tokenizer(tmp .. "/none.model") end, "bad spec")
  local msg = T.raises(function() sp(tmp .. "/none.model") end, "no SentencePiece model file")
  T.truthy(msg:find(tmp .. "/none.model", 1, true), "names the path: " .. msg)
end)

T.test("gemma: where the model file is looked for", function()
  local dir = tmp .. "/gemma_dir"
  bv.fs.mkdirs(dir)
  local msg = T.raises(function() bv.text.tokenizer("gemma", {gemma_dir = dir}) end,
                       "gemma tokenizer: no model file found")
  T.truthy(msg:find(dir .. "/gemma_tokenizer.model", 1, true), msg)
  T.truthy(msg:find(dir .. "/tokenizer.model", 1, true), msg)
  T.truthy(msg:find("BV_GEMMA_DIR", 1, true), msg)
  T.raises(function() bv.text.tokenizer("gemma(model='gs://bucket/tok.model')") end,
           "cannot read gs://bucket/tok.model")
  -- The file name big_vision's checkpoints ship with, or tokenizer.model.
  bv.fs.write_file(dir .. "/tokenizer.model", bv.fs.read_file(gemma_path))
  local tok = bv.text.tokenizer("gemma(tokensets=('loc', 'seg'))", {gemma_dir = dir})
  T.eq(tok.path, dir .. "/tokenizer.model")
  T.eq(tok.vocab_size, V + 1152)
  T.eq({tok.pad_token, tok.eos_token, tok.bos_token}, {0, 1, 2})
  T.eq(tok:piece_to_id("<loc0000>"), V)
  T.eq(tok:piece_to_id("<seg000>"), V + 1024)
end)

-- Only where the real Gemma tokenizer is present ($BV_GEMMA_DIR): big_vision's numbers.
T.test("gemma: the real tokenizer's ids (when $BV_GEMMA_DIR has it)", function()
  local ok, tok = pcall(bv.text.tokenizer, 'gemma(tokensets=("loc", "seg"))')
  if not ok then
    print("skipped: " .. tostring(tok))
    return
  end
  T.eq(tok.vocab_size, 257152)
  T.eq({tok.pad_token, tok.eos_token, tok.bos_token}, {0, 1, 2})
  T.eq(tok:to_int("\n"), {108})
  T.eq(tok:piece_to_id("<loc0000>"), 256000)
  T.eq(tok:piece_to_id("<seg000>"), 257024)
  local framed = tok:to_int("caption en<loc0012>", {bos = true, eos = true})
  T.eq(tok:to_str(framed), "caption en<loc0012>")
end)

T.test("train_sentencepiece: options and errors", function()
  local path = bv.text.train_sentencepiece{lines = LINES, vocab_size = 40, gemma_like = true,
                                           path = tmp .. "/like.model"}
  local tok = sp(path)
  T.eq(tok.vocab_size, 40)
  T.eq({tok.pad_token, tok.eos_token, tok.bos_token, tok.unk_token}, {0, 1, 2, 3})
  T.eq(tok:to_int("\n"), {tok:piece_to_id("\n")})
  T.eq(tok:to_str(tok:to_int("caption en\na cat")), "caption en\na cat")
  -- SentencePiece flags pass through (BPE), and a bad one is SentencePiece's error.
  bv.text.train_sentencepiece{lines = LINES, vocab_size = 40, model_type = "bpe",
                              path = tmp .. "/bpe.model"}
  T.eq(sp(tmp .. "/bpe.model").vocab_size, 40)
  T.raises(function()
    bv.text.train_sentencepiece{lines = LINES, vocab_size = 40, path = tmp .. "/x.model",
                                no_such_flag = 1}
  end, "no_such_flag")
  T.raises(function()
    bv.text.train_sentencepiece{lines = LINES, vocab_size = 4000, path = tmp .. "/big.model"}
  end, tmp .. "/big.model")
  T.raises(function() bv.text.train_sentencepiece{lines = LINES, path = "x"} end, "vocab_size")
end)

T.test("bv.text loads lazily like the other submodules", function()
  T.truthy(package.loaded["bv.text"] ~= nil)
  T.truthy(rawget(bv, "text") == package.loaded["bv.text"])
  T.eq(type(bv._text.load), "function")
end)

T.run()
os.execute("rm -rf '" .. tmp .. "'")
