// SentencePiece tokenizers as big_vision uses them (pp/ops_text.py's SentencepieceTokenizer):
// a .model file, optionally with "tokensets" (extra pieces such as PaliGemma's <loc0000>) added
// to the model as user-defined pieces, so that encoding keeps them whole and decoding prints
// them. Also a trainer for small models made on the fly (tests, tiny configs).
//
// SentencePiece's headers stay in tokenizer.cpp.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace bv {

class Tokenizer {
 public:
  // Reads a serialized SentencePiece model and adds `extra_pieces` the way big_vision's
  // _add_pieces does (see tokenizer.cpp). `name` (usually the path) appears in error messages.
  static Tokenizer from_file(const std::string& path,
                             const std::vector<std::string>& extra_pieces = {});
  static Tokenizer from_bytes(const std::string& model_bytes,
                              const std::vector<std::string>& extra_pieces,
                              const std::string& name);

  // SentencePiece's EncodeAsIds: no bos/eos (callers add those).
  std::vector<int> encode(std::string_view text) const;
  // SentencePiece's DecodeIds: control pieces (bos, eos, pad) vanish, user-defined ones print.
  // An id outside [0, vocab_size) is an error naming it.
  std::string decode(const std::vector<int>& ids) const;

  int vocab_size() const;
  int piece_to_id(std::string_view piece) const;  // unk_id() when the piece is unknown
  std::string id_to_piece(int id) const;
  bool is_control(int id) const;
  int pad_id() const;  // -1 when the model has none
  int eos_id() const;
  int bos_id() const;
  int unk_id() const;
  const std::string& name() const { return name_; }
  // The model with its extra pieces, serialized (what a .model file holds).
  std::string serialized() const;

 private:
  Tokenizer() = default;
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> model_;
  std::string name_;
};

// big_vision's tokensets: "loc" -> <loc0000>..<loc1023>, "seg" -> <seg000>..<seg127>.
// Any other name is an error listing the known ones.
std::vector<std::string> tokenset(const std::string& name);

// The pieces of several tokensets, sorted and without duplicates (big_vision passes them
// through np.unique, which sorts).
std::vector<std::string> extra_tokens(const std::vector<std::string>& tokensets);

// Big_vision's edit of a model: each extra piece (spaces written as U+2581) becomes a
// user-defined piece with score 0; a piece the model already has keeps its id, a new one is
// appended after the last id. Returns the new serialized model.
std::string add_pieces(const std::string& model_bytes, const std::vector<std::string>& extra_pieces,
                       const std::string& name);

// Trains a SentencePiece model on `lines` and writes it to `model_path` (atomically).
// `options` are SentencePiece trainer flags without the leading "--" (model_type, pad_id,
// eos_id, bos_id, unk_id, user_defined_symbols, ...); they override these defaults:
// character_coverage=1 (small texts have rare characters), num_threads=1 (reproducible),
// minloglevel=1 (no progress chatter on stderr).
void train_sentencepiece(const std::vector<std::string>& lines, int vocab_size,
                         const std::string& model_path,
                         const std::map<std::string, std::string>& options = {});

// The trainer options that give a model Gemma's special ids and pieces: pad=0 "<pad>",
// eos=1 "<eos>", bos=2 "<bos>", unk=3 "<unk>".
std::map<std::string, std::string> gemma_special_ids();

}  // namespace bv
