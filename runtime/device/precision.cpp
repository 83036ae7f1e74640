#include "device/precision.h"

#include <ATen/Context.h>

#include <cstdlib>

#include "core/error.h"

namespace bv {

const std::vector<std::string>& matmul_precision_names() {
  static const std::vector<std::string> names = {"default", "high", "highest"};
  return names;
}

void set_matmul_precision(const std::string& name) {
  bool known = false;
  for (const auto& n : matmul_precision_names()) known = known || n == name;
  BV_CHECK(known, "config.matmul_precision: '", name,
           "' is not one of \"default\", \"high\", \"highest\" (JAX's names; \"default\" and "
           "\"high\" allow TF32 on CUDA, \"highest\" is full float32)");
  bool tf32 = name != "highest";
  // The legacy setters, not setFloat32Precision("cuda", ...) alone: they keep libtorch's
  // backend-less float32_matmul_precision in step with the CUDA one (libtorch raises when the
  // two disagree), and they leave oneDNN's (the CPU's) precision alone.
  at::globalContext().setAllowTF32CuBLAS(tf32);
  at::globalContext().setAllowTF32CuDNN(tf32);
}

Tf32Flags tf32_flags() {
  Tf32Flags f;
  f.cublas = at::globalContext().allowTF32CuBLAS();
  f.cudnn = at::globalContext().allowTF32CuDNN();
  return f;
}

void set_deterministic(bool on) {
  // cuBLAS reads it when it makes its first handle; libtorch checks it for every matmul when
  // deterministic algorithms are on.
  if (on) ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(on);
  at::globalContext().setBenchmarkCuDNN(false);
}

bool deterministic() { return at::globalContext().deterministicAlgorithms(); }

}  // namespace bv
