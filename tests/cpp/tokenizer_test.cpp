// SentencePiece tokenizers (runtime/text/tokenizer.h): small models trained here from a few
// lines, big_vision's special-id and tokenset rules (pp/ops_text_test.py's cases where they
// apply), the model edit that adds pieces, and errors that name the file or the id.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "text/tokenizer.h"

using bv::Tokenizer;
using bv::test::contains;
using bv::test::error_of;
using bv::test::TempDir;

namespace {

const std::vector<std::string> kLines = {
    "a cat sat on the mat",
    "the dog ate the bone",
    "a bird in the hand is worth two in the bush",
    "the quick brown fox jumps over the lazy dog",
    "caption en",
    "answer en what is this",
    "a photo of a cat",
    "two dogs play in the park",
    "the sky is blue and the grass is green",
    "blah blah blah",
};

constexpr int kVocab = 50;

// One model per options set, trained once per test binary run.
const std::string& gemma_ids_model() {
  static TempDir dir("bv_tok");
  static std::string path = [] {
    std::string p = dir / "gemma_ids.model";
    bv::train_sentencepiece(kLines, kVocab, p, bv::gemma_special_ids());
    return p;
  }();
  return path;
}

// SentencePiece's own defaults: unk 0, bos 1 "<s>", eos 2 "</s>", no pad, like the model
// big_vision's tests use (sentencepiece's test_model.model).
const std::string& default_ids_model() {
  static TempDir dir("bv_tok");
  static std::string path = [] {
    std::string p = dir / "default_ids.model";
    bv::train_sentencepiece(kLines, kVocab, p);
    return p;
  }();
  return path;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("tokenizer: a trained model has the requested vocabulary and Gemma's special ids") {
  Tokenizer tok = Tokenizer::from_file(gemma_ids_model());
  CHECK(tok.vocab_size() == kVocab);
  CHECK(tok.pad_id() == 0);
  CHECK(tok.eos_id() == 1);
  CHECK(tok.bos_id() == 2);
  CHECK(tok.unk_id() == 3);
  CHECK(tok.id_to_piece(0) == "<pad>");
  CHECK(tok.id_to_piece(1) == "<eos>");
  CHECK(tok.id_to_piece(2) == "<bos>");
  CHECK(tok.id_to_piece(3) == "<unk>");
  CHECK(tok.is_control(0));
  CHECK(tok.is_control(1));
  CHECK_FALSE(tok.is_control(4));
  CHECK(tok.name() == gemma_ids_model());
}

TEST_CASE("tokenizer: encode and decode round-trip, control ids print nothing") {
  Tokenizer tok = Tokenizer::from_file(gemma_ids_model());
  for (const auto& line : kLines) {
    std::vector<int> ids = tok.encode(line);
    REQUIRE_FALSE(ids.empty());
    for (int id : ids) CHECK((id >= 4 && id < kVocab));  // no specials from plain text
    CHECK(tok.decode(ids) == line);
    // bos, eos and padding vanish when decoding, as in SentencePiece's DecodeIds.
    CHECK(tok.decode(concat(concat({2}, ids), {1, 0, 0})) == line);
  }
  CHECK(tok.encode("").empty());
  CHECK(tok.decode({}).empty());
  // Pieces and ids agree both ways.
  for (int id = 0; id < kVocab; ++id) CHECK(tok.piece_to_id(tok.id_to_piece(id)) == id);
  CHECK(tok.piece_to_id("no-such-piece") == tok.unk_id());
}

TEST_CASE("tokenizer: tokensets are big_vision's, sorted") {
  auto loc = bv::tokenset("loc");
  REQUIRE(loc.size() == 1024);
  CHECK(loc.front() == "<loc0000>");
  CHECK(loc[7] == "<loc0007>");
  CHECK(loc.back() == "<loc1023>");
  auto seg = bv::tokenset("seg");
  REQUIRE(seg.size() == 128);
  CHECK(seg.front() == "<seg000>");
  CHECK(seg.back() == "<seg127>");
  auto both = bv::extra_tokens({"seg", "loc", "loc"});  // np.unique: sorted, no duplicates
  REQUIRE(both.size() == 1152);
  CHECK(both[0] == "<loc0000>");
  CHECK(both[1023] == "<loc1023>");
  CHECK(both[1024] == "<seg000>");
  CHECK(both[1151] == "<seg127>");
  CHECK(contains(error_of([] { bv::tokenset("boxes"); }), "unknown tokenset 'boxes'"));
}

TEST_CASE("tokenizer: tokenset pieces come right after the base vocabulary") {
  // Gemma: 256000 + 1024 + 128 = 257152, <locXXXX> = 256000 + XXXX, <segYYY> = 257024 + YYY.
  // Here the base vocabulary is kVocab.
  Tokenizer tok = Tokenizer::from_file(gemma_ids_model(), bv::extra_tokens({"loc", "seg"}));
  REQUIRE(tok.vocab_size() == kVocab + 1024 + 128);
  CHECK(tok.piece_to_id("<loc0000>") == kVocab);
  CHECK(tok.piece_to_id("<loc0512>") == kVocab + 512);
  CHECK(tok.piece_to_id("<loc1023>") == kVocab + 1023);
  CHECK(tok.piece_to_id("<seg000>") == kVocab + 1024);
  CHECK(tok.piece_to_id("<seg127>") == kVocab + 1151);
  CHECK(tok.is_control(1));  // specials unchanged
  CHECK_FALSE(tok.is_control(kVocab));

  // big_vision: to_int("blah<loc0000><loc1023>") = ids("blah") + [V, V + 1023].
  Tokenizer plain = Tokenizer::from_file(gemma_ids_model());
  std::vector<int> blah = plain.encode("blah");
  CHECK(tok.encode("blah<loc0000><loc1023>") == concat(blah, {kVocab, kVocab + 1023}));
  CHECK(tok.decode(concat(blah, {kVocab + 1023, kVocab + 1024 + 5})) == "blah<loc1023><seg005>");
  // Without the tokenset the same text falls apart into ordinary pieces.
  CHECK(plain.encode("<loc0000>").size() > 1);
}

TEST_CASE("tokenizer: extra pieces the model has keep their ids and print when decoding") {
  // big_vision's sp_extra_tokens case: ["<s>", "</s>", "<pad>"] on a model with bos "<s>",
  // eos "</s>" and no pad: the first two become user-defined in place, <pad> is appended.
  Tokenizer plain = Tokenizer::from_file(default_ids_model());
  REQUIRE(plain.bos_id() == 1);
  REQUIRE(plain.eos_id() == 2);
  REQUIRE(plain.pad_id() == -1);
  std::vector<int> blah = plain.encode("blah");
  std::vector<int> framed = concat(concat({1}, blah), {2});
  CHECK(plain.decode(framed) == "blah");

  Tokenizer extra = Tokenizer::from_file(default_ids_model(), {"<s>", "</s>", "<pad>"});
  CHECK(extra.vocab_size() == kVocab + 1);
  CHECK(extra.piece_to_id("<s>") == 1);
  CHECK(extra.piece_to_id("</s>") == 2);
  CHECK(extra.piece_to_id("<pad>") == kVocab);
  // SentencePiece reports bos/eos only while their pieces are control pieces; now they are
  // user-defined, so (in big_vision too) the tokenizer has no bos or eos any more.
  CHECK(extra.bos_id() == -1);
  CHECK(extra.eos_id() == -1);
  CHECK(extra.decode(framed) == "<s> blah</s>");

  // A space in an extra piece is SentencePiece's U+2581.
  Tokenizer spaced = Tokenizer::from_file(default_ids_model(), {"hello world"});
  CHECK(spaced.piece_to_id("hello\xE2\x96\x81world") == kVocab);
  std::vector<int> ids = spaced.encode("hello world");
  CHECK(std::find(ids.begin(), ids.end(), kVocab) != ids.end());
}

TEST_CASE("tokenizer: the edited model serializes and loads back the same") {
  Tokenizer tok = Tokenizer::from_file(gemma_ids_model(), bv::extra_tokens({"seg"}));
  TempDir dir("bv_tok");
  std::string path = dir / "edited.model";
  {
    std::ofstream out(path, std::ios::binary);
    std::string bytes = tok.serialized();
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  Tokenizer again = Tokenizer::from_file(path);
  CHECK(again.vocab_size() == kVocab + 128);
  CHECK(again.piece_to_id("<seg042>") == kVocab + 42);
  CHECK(again.encode("a cat<seg001>") == tok.encode("a cat<seg001>"));
}

TEST_CASE("tokenizer: Gemma-like options keep newlines and spacing") {
  TempDir dir("bv_tok");
  std::string path = dir / "gemma_like.model";
  auto options = bv::gemma_special_ids();
  options["normalization_rule_name"] = "identity";
  options["remove_extra_whitespaces"] = "false";
  options["add_dummy_prefix"] = "false";
  options["user_defined_symbols"] = "\n";
  bv::train_sentencepiece(kLines, kVocab, path, options);
  Tokenizer tok = Tokenizer::from_file(path);
  std::vector<int> nl = tok.encode("\n");
  REQUIRE(nl.size() == 1);
  CHECK(tok.id_to_piece(nl[0]) == "\n");
  CHECK(tok.decode(tok.encode("a cat\non  the mat ")) == "a cat\non  the mat ");
  // The default normalizer turns the newline into a space and collapses spaces.
  Tokenizer normalized = Tokenizer::from_file(gemma_ids_model());
  CHECK(normalized.encode("\n").empty());
  CHECK(normalized.decode(normalized.encode("a cat\non  the mat")) == "a cat on the mat");
}

TEST_CASE("tokenizer: training is reproducible") {
  TempDir dir("bv_tok");
  bv::train_sentencepiece(kLines, kVocab, dir / "a.model", bv::gemma_special_ids());
  bv::train_sentencepiece(kLines, kVocab, dir / "b.model", bv::gemma_special_ids());
  Tokenizer a = Tokenizer::from_file(dir / "a.model"), b = Tokenizer::from_file(dir / "b.model");
  CHECK(a.serialized() == b.serialized());
}

TEST_CASE("tokenizer: errors name the file, the id or the option") {
  TempDir dir("bv_tok");
  std::string missing = dir / "nope.model";
  std::string msg = error_of([&] { Tokenizer::from_file(missing); });
  CHECK(contains(msg, missing));
  CHECK(contains(msg, "no SentencePiece model file"));

  CHECK(contains(error_of([&] { Tokenizer::from_file(dir.path); }), "is a directory"));

  std::string garbage = dir / "garbage.model";
  {
    std::ofstream out(garbage, std::ios::binary);
    out << "this is not a protobuf \x01\x02\x03 at all";
  }
  msg = error_of([&] { Tokenizer::from_file(garbage); });
  CHECK(contains(msg, garbage));
  CHECK(contains(msg, "not a valid SentencePiece model"));
  // With extra pieces the bytes are read before any edit: the same clear error.
  CHECK(contains(error_of([&] { Tokenizer::from_file(garbage, {"<x>"}); }), garbage));

  Tokenizer tok = Tokenizer::from_file(gemma_ids_model());
  msg = error_of([&] { tok.decode({5, kVocab}); });
  CHECK(contains(msg, "token id 50"));
  CHECK(contains(msg, "position 2"));
  CHECK(contains(error_of([&] { tok.decode({-1}); }), "token id -1"));
  CHECK(contains(error_of([&] { tok.id_to_piece(kVocab + 3); }), "token id 53"));

  std::string too_big = dir / "too_big.model";
  msg = error_of([&] { bv::train_sentencepiece(kLines, 5000, too_big); });
  CHECK(contains(msg, too_big));
  CHECK(contains(msg, "vocab_size 5000"));
  CHECK(contains(msg, "Vocabulary size"));  // SentencePiece's own reason
  CHECK(contains(error_of([&] {
                   bv::train_sentencepiece(kLines, 40, too_big, {{"input", "x"}});
                 }),
                 "option 'input'"));
  CHECK(contains(error_of([&] { bv::train_sentencepiece({}, 40, too_big); }), "no training lines"));
}
