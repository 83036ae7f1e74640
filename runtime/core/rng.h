// Seedable random streams. One Rng is one independent stream: the same seed gives the same
// numbers on every run, and nothing here touches libtorch's global generator. pp ops and
// trainers get an Rng handed to them instead of drawing from global state.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>

namespace bv {

struct Rng {
  at::Generator gen;  // a CPU generator (mt19937), also usable by at::rand/at::randn

  explicit Rng(uint64_t seed);

  uint64_t next_u64();
  double uniform();                      // [0, 1)
  double uniform(double lo, double hi);  // [lo, hi)
  double normal(double mean = 0, double std = 1);
  int64_t integer(int64_t lo, int64_t hi);  // inclusive on both ends, as Lua's math.random
  // A new stream seeded from this one: for handing out per-example streams.
  Rng split();

  // The whole generator state as a uint8 tensor, for checkpoints; set_state restores it exactly.
  at::Tensor state();
  void set_state(const at::Tensor& state);
};

}  // namespace bv
