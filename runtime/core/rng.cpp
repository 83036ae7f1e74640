#include "core/rng.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <mutex>

#include "core/error.h"

namespace bv {

Rng::Rng(uint64_t seed) : gen(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

uint64_t Rng::next_u64() {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64();
}

double Rng::uniform() {
  // The top 53 bits give every double in [0, 1) on a 2^-53 grid.
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

double Rng::normal(double mean, double std) {
  // Box-Muller on our own uniforms, so the result depends only on the seed.
  double u1 = 1.0 - uniform();  // (0, 1], keeps log finite
  double u2 = uniform();
  double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return mean + std * z;
}

int64_t Rng::integer(int64_t lo, int64_t hi) {
  BV_CHECK(lo <= hi, "rng:integer: empty interval [", lo, ", ", hi, "]");
  uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  if (span == 0) return static_cast<int64_t>(next_u64());  // the full 64-bit range
  // Rejection sampling keeps every value equally likely.
  uint64_t limit = UINT64_MAX - UINT64_MAX % span;
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % span);
}

Rng Rng::split() { return Rng(next_u64()); }

at::Tensor Rng::state() {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void Rng::set_state(const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace bv
