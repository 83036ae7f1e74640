// config.matmul_precision: how float32 matmuls and convolutions run on CUDA, by JAX's names
// (jax.default_matmul_precision). big_vision runs with JAX's "default", which on Ampere and
// Hopper GPUs multiplies float32 in TF32 (10-bit mantissas, float32 accumulation); libtorch's
// own default is full float32 for cuBLAS (and TF32 for cuDNN). Only the CUDA flags change: the
// CPU's numbers are the same under every setting.
//   "default", "high"  TF32 allowed in cuBLAS matmuls and cuDNN convolutions
//   "highest"          full float32 in both
#pragma once

#include <string>
#include <vector>

namespace bv {

// The names set_matmul_precision takes, in order.
const std::vector<std::string>& matmul_precision_names();

// Sets libtorch's CUDA TF32 flags for `name`; an unknown name is an error naming the key
// (config.matmul_precision) and the names above. Process-wide, as JAX's setting is.
void set_matmul_precision(const std::string& name);

// What libtorch's flags say now: TF32 in cuBLAS matmuls, in cuDNN convolutions.
struct Tf32Flags {
  bool cublas = false, cudnn = false;
};
Tf32Flags tf32_flags();

// config.deterministic (as torch.use_deterministic_algorithms and JAX's
// --xla_gpu_deterministic_ops): on CUDA, every op picks a deterministic kernel, and one that has
// none raises an error naming it instead of running; cuDNN's autotuner is off. cuBLAS needs
// CUBLAS_WORKSPACE_CONFIG for that, which this sets (":4096:8") unless it is set already: call it
// before the first matmul. Off again restores libtorch's defaults. The CPU's kernels are
// deterministic either way.
void set_deterministic(bool on);
bool deterministic();

}  // namespace bv
