#include "data/example.h"

#include <ATen/ATen.h>

namespace bv::data {

Value Value::boolean(bool v) {
  Value out;
  out.kind = Kind::kBool;
  out.b = v;
  return out;
}

Value Value::integer(int64_t v) {
  Value out;
  out.kind = Kind::kInt;
  out.i = v;
  return out;
}

Value Value::number(double v) {
  Value out;
  out.kind = Kind::kFloat;
  out.f = v;
  return out;
}

Value Value::string(std::string v) {
  Value out;
  out.kind = Kind::kString;
  out.s = std::move(v);
  return out;
}

Value Value::file(std::string path) {
  Value out;
  out.kind = Kind::kFile;
  out.s = std::move(path);
  return out;
}

Value Value::of_tensor(at::Tensor t) {
  Value out;
  out.kind = Kind::kTensor;
  out.tensor = std::move(t);
  return out;
}

const Value* find(const Example& ex, const std::string& key) {
  for (const auto& kv : ex) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

std::string Origin::str() const { return line > 0 ? file + ":" + std::to_string(line) : file; }

}  // namespace bv::data
