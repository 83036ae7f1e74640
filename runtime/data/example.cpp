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

namespace {

int64_t value_bytes(const Value& v) {
  int64_t n = static_cast<int64_t>(sizeof(Value) + v.s.size());
  if (v.kind == Value::Kind::kTensor && v.tensor.defined()) n += v.tensor.nbytes();
  for (const Value& x : v.list) n += value_bytes(x);
  return n;
}

}  // namespace

int64_t example_bytes(const Example& ex) {
  int64_t n = static_cast<int64_t>(sizeof(Example));
  for (const auto& [key, v] : ex) {
    n += static_cast<int64_t>(sizeof(std::string) + key.size()) + value_bytes(v);
  }
  return n;
}

std::string Origin::str() const { return line > 0 ? file + ":" + std::to_string(line) : file; }

}  // namespace bv::data
