// Tensor helpers shared by every layer: dtype names as users write them ("float32", "uint8",
// "bfloat16"), one-line summaries and small value dumps. Kept free of heavy ATen includes.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace at {
class Tensor;
}

namespace bv {

// numpy-style names: float32 float64 float16 bfloat16 uint8 int8 int16 int32 int64 bool.
std::string dtype_name(c10::ScalarType type);
// Accepts those names and a few aliases (float, double, half, long, int, byte); throws bv::Error
// naming the bad string and listing the valid ones.
c10::ScalarType dtype_from_name(const std::string& name);
bool is_dtype_name(const std::string& name);

// "[2x3]" (or "[]" for a scalar).
std::string shape_string(const at::Tensor& t);
// One line: "Tensor[float32 2x3 cpu] min=.. max=.. mean=..", values inline when tiny.
std::string tensor_summary(const at::Tensor& t);
// Nested, multi-line dump of every value, PyTorch-like.
std::string tensor_values(const at::Tensor& t);

}  // namespace bv
