// The simulator's one source of randomness: splitmix64, with bounded helpers of our own.
//
// A seed means the same values forever and on every standard library: no std distributions are
// used. Tensors are filled from this generator on the host, so CPU and CUDA runs see the same bits.
#pragma once

#include <cstdint>

namespace sc::rig {

// splitmix64 (Steele, Lea, Flood 2014): a 64-bit state advanced by a Weyl increment.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  // The next 64 random bits.
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) by rejection; bound > 0.
  uint64_t below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do x = next(); while (x >= limit);
    return x % bound;
  }
  // Uniform float in [-1, 1) with 24 random bits.
  float symmetric_unit() {
    return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }

 private:
  uint64_t state_;
};

}  // namespace sc::rig
