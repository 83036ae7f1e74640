#include "text/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <unordered_map>

#include "core/error.h"
#include "core/fs.h"

namespace bv {

namespace {

// --- SentencePiece -------------------------------------------------------------------------------
// Linked directly. Debian's libtorch 1.13 loaded libprotobuf 3.21, which clashed with the private
// protobuf-lite that Debian's libsentencepiece exports, so SentencePiece used to live in a shim
// library of its own opened with RTLD_DEEPBIND. The wheel's libtorch links protobuf statically
// and exports none of its runtime (only template instances for its own onnx classes), so
// nothing clashes any more; tokenizer_test covers loading, encoding and training.

namespace sp = sentencepiece;

void check_status(const sp::util::Status& status, const std::string& what) {
  if (!status.ok()) fail(what, ": ", status.ToString());
}

std::shared_ptr<const sp::SentencePieceProcessor> load_model(const std::string& bytes,
                                                             const std::string& name) {
  auto model = std::make_shared<sp::SentencePieceProcessor>();
  check_status(model->LoadFromSerializedProto(bytes),
               "tokenizer '" + name + "': not a valid SentencePiece model");
  return model;
}

// The trainer reads its sentences from here instead of an input file.
class LinesIterator : public sp::SentenceIterator {
 public:
  explicit LinesIterator(const std::vector<std::string>& lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return lines_[i_]; }
  sp::util::Status status() const override { return sp::util::Status(); }

 private:
  const std::vector<std::string>& lines_;
  size_t i_ = 0;
};

// --- The little of protobuf's wire format that editing a ModelProto needs ----------------------
// Debian ships SentencePiece without its generated proto classes (and with a private protobuf),
// so big_vision's edit of the model proto is done here on the serialized bytes: a ModelProto is a
// sequence of fields, and field 1 (repeated SentencePiece pieces) is what we rewrite.

constexpr uint32_t kPiecesField = 1;
constexpr uint64_t kUserDefinedType = 4;        // SentencePiece.Type.USER_DEFINED
const char* const kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's spelling of ' '

struct WireField {
  uint32_t number;
  std::string_view bytes;  // the whole field: tag and value
};

bool read_varint(std::string_view s, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && pos < s.size(); shift += 7) {
    auto byte = static_cast<uint8_t>(s[pos++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

// Splits a serialized message into its top-level fields, in order.
std::vector<WireField> split_fields(std::string_view msg, const std::string& name) {
  std::vector<WireField> fields;
  size_t pos = 0;
  while (pos < msg.size()) {
    size_t start = pos;
    uint64_t tag = 0, len = 0;
    BV_CHECK(read_varint(msg, pos, tag), "tokenizer '", name, "': corrupt model (bad field tag)");
    switch (tag & 7) {
      case 0:
        BV_CHECK(read_varint(msg, pos, len), "tokenizer '", name, "': corrupt model (varint)");
        break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2:
        BV_CHECK(read_varint(msg, pos, len) && len <= msg.size() - pos, "tokenizer '", name,
                 "': corrupt model (field ", (tag >> 3), " runs past the end)");
        pos += len;
        break;
      default: fail("tokenizer '", name, "': corrupt model (wire type ", (tag & 7), ")");
    }
    BV_CHECK(pos <= msg.size(), "tokenizer '", name, "': corrupt model (truncated)");
    fields.push_back({static_cast<uint32_t>(tag >> 3), msg.substr(start, pos - start)});
  }
  return fields;
}

// A ModelProto.pieces entry: {piece, score = 0, type = USER_DEFINED}, tag included.
std::string user_defined_piece_field(const std::string& piece) {
  std::string body;
  body.push_back(static_cast<char>((1 << 3) | 2));  // piece: string
  put_varint(body, piece.size());
  body += piece;
  body.push_back(static_cast<char>((2 << 3) | 5));  // score: float 0.0
  body.append(4, '\0');
  body.push_back(static_cast<char>((3 << 3) | 0));  // type: enum
  put_varint(body, kUserDefinedType);
  std::string field;
  put_varint(field, (kPiecesField << 3) | 2);
  put_varint(field, body.size());
  return field + body;
}

std::string spaces_as_marks(const std::string& piece) {
  std::string out;
  for (char c : piece) {
    if (c == ' ') out += kSpaceMark;
    else out.push_back(c);
  }
  return out;
}

}  // namespace

std::string add_pieces(const std::string& model_bytes, const std::vector<std::string>& extra_pieces,
                       const std::string& name) {
  if (extra_pieces.empty()) return model_bytes;
  auto original = load_model(model_bytes, name);
  const int unk = original->PieceToId("<unk>");
  BV_CHECK(original->IdToPiece(unk) == "<unk>", "tokenizer '", name,
           "': extra pieces need a model whose unknown piece is '<unk>'");

  // A piece the model already knows is replaced where it is (it keeps its id, and being
  // user-defined now, decoding prints it); <unk> itself is the one known piece that PieceToId
  // cannot tell from an unknown one, hence the exclusive or, as in big_vision.
  std::map<int, std::string> replaced;
  std::vector<std::string> appended;
  for (const auto& extra : extra_pieces) {
    std::string piece = spaces_as_marks(extra);
    int existing = original->PieceToId(piece);
    if ((existing != unk) != (piece == "<unk>")) {
      replaced[existing] = user_defined_piece_field(piece);
    } else {
      appended.push_back(user_defined_piece_field(piece));
    }
  }

  auto fields = split_fields(model_bytes, name);
  size_t last_piece = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].number == kPiecesField) last_piece = i;
  }
  std::string out;
  out.reserve(model_bytes.size() + appended.size() * 24);
  int piece_id = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].number == kPiecesField) {
      auto it = replaced.find(piece_id++);
      out += it != replaced.end() ? std::string_view(it->second) : fields[i].bytes;
    } else {
      out += fields[i].bytes;
    }
    if (i == last_piece) {
      for (const auto& field : appended) out += field;
    }
  }
  return out;
}

Tokenizer Tokenizer::from_file(const std::string& path,
                               const std::vector<std::string>& extra_pieces) {
  BV_CHECK(fs::exists(path), "tokenizer: no SentencePiece model file at '", path, "'");
  BV_CHECK(!fs::is_dir(path), "tokenizer: '", path, "' is a directory, not a .model file");
  return from_bytes(fs::read_file(path), extra_pieces, path);
}

Tokenizer Tokenizer::from_bytes(const std::string& model_bytes,
                                const std::vector<std::string>& extra_pieces,
                                const std::string& name) {
  Tokenizer t;
  t.name_ = name;
  t.model_ = load_model(add_pieces(model_bytes, extra_pieces, name), name);
  return t;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  check_status(model_->Encode(text, &ids), "tokenizer '" + name_ + "': cannot encode text");
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  const int n = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    BV_CHECK(ids[i] >= 0 && ids[i] < n, "tokenizer '", name_, "': token id ", ids[i],
             " (at position ", i + 1, ") is outside the vocabulary [0, ", n, ")");
  }
  std::string text;
  check_status(model_->Decode(ids, &text), "tokenizer '" + name_ + "': cannot decode ids");
  return text;
}

int Tokenizer::vocab_size() const { return model_->GetPieceSize(); }
int Tokenizer::piece_to_id(std::string_view piece) const { return model_->PieceToId(piece); }

std::string Tokenizer::id_to_piece(int id) const {
  BV_CHECK(id >= 0 && id < vocab_size(), "tokenizer '", name_, "': token id ", id,
           " is outside the vocabulary [0, ", vocab_size(), ")");
  return model_->IdToPiece(id);
}

bool Tokenizer::is_control(int id) const {
  return id >= 0 && id < vocab_size() && model_->IsControl(id);
}

int Tokenizer::pad_id() const { return model_->pad_id(); }
int Tokenizer::eos_id() const { return model_->eos_id(); }
int Tokenizer::bos_id() const { return model_->bos_id(); }
int Tokenizer::unk_id() const { return model_->unk_id(); }

std::string Tokenizer::serialized() const { return model_->serialized_model_proto(); }

std::vector<std::string> tokenset(const std::string& name) {
  std::vector<std::string> out;
  char buf[16];
  if (name == "loc") {
    for (int i = 0; i < 1024; ++i) {
      std::snprintf(buf, sizeof buf, "<loc%04d>", i);
      out.emplace_back(buf);
    }
  } else if (name == "seg") {
    for (int i = 0; i < 128; ++i) {
      std::snprintf(buf, sizeof buf, "<seg%03d>", i);
      out.emplace_back(buf);
    }
  } else {
    fail("tokenizer: unknown tokenset '", name, "' (known: loc, seg)");
  }
  return out;
}

std::vector<std::string> extra_tokens(const std::vector<std::string>& tokensets) {
  std::set<std::string> unique;  // byte order, as np.unique sorts Python strings of ASCII
  for (const auto& name : tokensets) {
    for (auto& piece : tokenset(name)) unique.insert(std::move(piece));
  }
  return {unique.begin(), unique.end()};
}

std::map<std::string, std::string> gemma_special_ids() {
  return {{"pad_id", "0"},        {"eos_id", "1"},        {"bos_id", "2"},
          {"unk_id", "3"},        {"pad_piece", "<pad>"}, {"eos_piece", "<eos>"},
          {"bos_piece", "<bos>"}, {"unk_piece", "<unk>"}};
}

void train_sentencepiece(const std::vector<std::string>& lines, int vocab_size,
                         const std::string& model_path,
                         const std::map<std::string, std::string>& options) {
  BV_CHECK(!lines.empty(), "train_sentencepiece: no training lines for '", model_path, "'");
  BV_CHECK(vocab_size > 0, "train_sentencepiece: vocab_size must be positive, got ", vocab_size);
  std::map<std::string, std::string> args = {
      {"character_coverage", "1"}, {"num_threads", "1"}, {"minloglevel", "1"}};
  for (const auto& [key, value] : options) {
    BV_CHECK(key != "input" && key != "model_prefix", "train_sentencepiece: option '", key,
             "' is not for here (lines come from the caller, the model goes to model_path)");
    args[key] = value;
  }
  args["vocab_size"] = std::to_string(vocab_size);
  std::unordered_map<std::string, std::string> trainer_args(args.begin(), args.end());
  LinesIterator it(lines);
  std::string model;
  check_status(sp::SentencePieceTrainer::Train(trainer_args, &it, &model),
               str("train_sentencepiece: training '", model_path, "' (vocab_size ", vocab_size,
                   ", ", lines.size(), " lines) failed"));
  fs::write_file(model_path, model);
}

}  // namespace bv
