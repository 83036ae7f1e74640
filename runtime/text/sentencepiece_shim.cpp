// libbv_sentencepiece.so: SentencePiece behind the C interface of sentencepiece_shim.h. Built as
// its own shared library (see CMakeLists.txt), never linked into bv_runtime; nothing here may
// throw across the interface.
#include "text/sentencepiece_shim.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

struct bv_sp_model {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

namespace sp = sentencepiece;

char* copy_out(const std::string& s, size_t* size = nullptr) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) return nullptr;
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  if (size) *size = s.size();
  return p;
}

char* error_of(const sp::util::Status& status) {
  return status.ok() ? nullptr : copy_out(status.ToString());
}

// Runs fn, turning any C++ exception into an error message (nothing crosses the C interface).
template <typename Fn>
char* guard(Fn fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return copy_out(std::string("SentencePiece: ") + e.what());
  } catch (...) {
    return copy_out("SentencePiece: unknown exception");
  }
}

char* load(const char* bytes, size_t size, bv_sp_model** out) {
  *out = nullptr;
  return guard([&]() -> char* {
    auto* model = new bv_sp_model;
    auto status = model->sp.LoadFromSerializedProto(std::string_view(bytes, size));
    if (!status.ok()) {
      delete model;
      return error_of(status);
    }
    *out = model;
    return nullptr;
  });
}

void release(bv_sp_model* model) { delete model; }

void free_buffer(void* buffer) { std::free(buffer); }

char* encode(const bv_sp_model* model, const char* text, size_t size, int** ids, size_t* count) {
  *ids = nullptr;
  *count = 0;
  return guard([&]() -> char* {
    std::vector<int> out;
    auto status = model->sp.Encode(std::string_view(text, size), &out);
    if (!status.ok()) return error_of(status);
    *ids = static_cast<int*>(std::malloc(sizeof(int) * (out.size() + 1)));
    if (!*ids) return copy_out("SentencePiece: out of memory");
    std::copy(out.begin(), out.end(), *ids);
    *count = out.size();
    return nullptr;
  });
}

char* decode(const bv_sp_model* model, const int* ids, size_t count, char** text, size_t* size) {
  *text = nullptr;
  *size = 0;
  return guard([&]() -> char* {
    std::string out;
    auto status = model->sp.Decode(std::vector<int>(ids, ids + count), &out);
    if (!status.ok()) return error_of(status);
    *text = copy_out(out, size);
    return nullptr;
  });
}

int piece_size(const bv_sp_model* model) { return model->sp.GetPieceSize(); }

int piece_to_id(const bv_sp_model* model, const char* piece, size_t size) {
  return model->sp.PieceToId(std::string_view(piece, size));
}

char* id_to_piece(const bv_sp_model* model, int id) { return copy_out(model->sp.IdToPiece(id)); }

int is_control(const bv_sp_model* model, int id) { return model->sp.IsControl(id) ? 1 : 0; }

void special_ids(const bv_sp_model* model, int ids[4]) {
  ids[0] = model->sp.pad_id();
  ids[1] = model->sp.eos_id();
  ids[2] = model->sp.bos_id();
  ids[3] = model->sp.unk_id();
}

char* serialize(const bv_sp_model* model, char** bytes, size_t* size) {
  *bytes = nullptr;
  return guard([&]() -> char* {
    *bytes = copy_out(model->sp.serialized_model_proto(), size);
    return nullptr;
  });
}

// The trainer reads its sentences from here instead of an input file.
class LinesIterator : public sp::SentenceIterator {
 public:
  LinesIterator(const char* const* lines, const size_t* sizes, size_t n)
      : lines_(lines), sizes_(sizes), n_(n) {
    if (n_ > 0) current_.assign(lines_[0], sizes_[0]);
  }
  bool done() const override { return i_ >= n_; }
  void Next() override {
    if (++i_ < n_) current_.assign(lines_[i_], sizes_[i_]);
  }
  const std::string& value() const override { return current_; }
  sp::util::Status status() const override { return sp::util::Status(); }

 private:
  const char* const* lines_;
  const size_t* sizes_;
  size_t n_, i_ = 0;
  std::string current_;
};

char* train(const char* const* keys, const char* const* values, size_t num_options,
            const char* const* lines, const size_t* line_sizes, size_t num_lines, char** model,
            size_t* model_size) {
  *model = nullptr;
  *model_size = 0;
  return guard([&]() -> char* {
    std::unordered_map<std::string, std::string> args;
    for (size_t i = 0; i < num_options; ++i) args[keys[i]] = values[i];
    LinesIterator it(lines, line_sizes, num_lines);
    std::string out;
    auto status = sp::SentencePieceTrainer::Train(args, &it, &out);
    if (!status.ok()) return error_of(status);
    *model = copy_out(out, model_size);
    return nullptr;
  });
}

const bv_sp_api kApi = {
    BV_SP_API_VERSION, free_buffer, load,        release,     encode,    decode,
    piece_size,        piece_to_id, id_to_piece, is_control,  special_ids, serialize,
    train,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const bv_sp_api* bv_sentencepiece_api(void) {
  return &kApi;
}
