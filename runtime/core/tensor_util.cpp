#include "core/tensor_util.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace bv {

namespace {

struct DtypeName {
  const char* name;
  c10::ScalarType type;
};

// First entry per type is the canonical name; later ones are accepted aliases.
const DtypeName kDtypes[] = {
    {"float32", at::kFloat},     {"float64", at::kDouble}, {"float16", at::kHalf},
    {"bfloat16", at::kBFloat16}, {"uint8", at::kByte},     {"int8", at::kChar},
    {"int16", at::kShort},       {"int32", at::kInt},      {"int64", at::kLong},
    {"bool", at::kBool},         {"float", at::kFloat},    {"double", at::kDouble},
    {"half", at::kHalf},         {"long", at::kLong},      {"int", at::kInt},
    {"byte", at::kByte},
};

std::string format_number(double v, bool integral) {
  char buf[64];
  if (integral) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.5g", v);
  }
  return buf;
}

// Appends the values of `t` (on CPU, double or int64) as nested brackets.
void append_values(std::string& out, const at::Tensor& t, bool integral, bool is_bool, int indent) {
  if (t.dim() == 0) {
    double v = t.item<double>();
    out += is_bool ? (v != 0 ? "true" : "false") : format_number(v, integral);
    return;
  }
  out += "[";
  int64_t n = t.size(0);
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) {
      if (t.dim() > 1) {
        out += ",\n";
        out.append(indent + 1, ' ');
      } else {
        out += ", ";
      }
    }
    append_values(out, t[i], integral, is_bool, indent + 1);
  }
  out += "]";
}

}  // namespace

std::string dtype_name(c10::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return c10::toString(type);
}

c10::ScalarType dtype_from_name(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return d.type;
  }
  fail(
      "unknown dtype '", name,
      "' (expected float32, float64, float16, bfloat16, uint8, int8, int16, int32, int64 or bool)");
}

bool is_dtype_name(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return true;
  }
  return false;
}

std::string shape_string(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i > 0) s += "x";
    s += std::to_string(t.size(i));
  }
  return s + "]";
}

std::string tensor_summary(const at::Tensor& t) {
  if (!t.defined()) return "Tensor[undefined]";
  std::string s = "Tensor[" + dtype_name(t.scalar_type()) + " " + shape_string(t) + " " +
                  t.device().str() + "]";
  if (t.numel() == 0) return s;
  at::Tensor d = t.detach().to(at::kCPU, at::kDouble);
  bool integral = !at::isFloatingType(t.scalar_type());
  s += " min=" + format_number(d.min().item<double>(), integral);
  s += " max=" + format_number(d.max().item<double>(), integral);
  s += " mean=" + format_number(d.mean().item<double>(), false);
  return s;
}

std::string tensor_values(const at::Tensor& t) {
  if (!t.defined()) return "Tensor[undefined]";
  at::Tensor d = t.detach().to(at::kCPU, at::kDouble);
  bool is_bool = t.scalar_type() == at::kBool;
  bool integral = !at::isFloatingType(t.scalar_type());
  std::string out = "tensor(";
  append_values(out, d, integral, is_bool, 7);
  out += ", " + dtype_name(t.scalar_type());
  if (!t.device().is_cpu()) out += ", " + t.device().str();
  return out + ")";
}

}  // namespace bv
