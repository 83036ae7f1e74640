// An example as it moves through the input pipeline: an ordered list of (key, value). Raw
// examples come from a source (JSON-L fields, file paths to read); processed ones come back from
// the pp function (tensors, strings, numbers, lists of strings) and are stacked into batches.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bv::data {

struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kFile, kTensor, kList };
  Kind kind = Kind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;            // kString: the bytes; kFile: the path whose bytes the pp gets
  at::Tensor tensor;        // kTensor
  std::vector<Value> list;  // kList (from JSON arrays, or lists of strings from the pp)

  static Value none() { return Value(); }
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value file(std::string path);
  static Value of_tensor(at::Tensor t);
};

using Example = std::vector<std::pair<std::string, Value>>;

// The value under `key`, or nullptr.
const Value* find(const Example& ex, const std::string& key);

// About how many bytes of memory `ex` holds: its tensors' data, strings and lists, and the
// structs that hold them (so an example of nothing but small numbers still counts).
int64_t example_bytes(const Example& ex);

// Where an example came from, for error messages: "data/train.jsonl:17".
struct Origin {
  std::string file;
  int64_t line = 0;
  std::string str() const;
};

}  // namespace bv::data
