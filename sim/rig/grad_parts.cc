#include "sim/rig/grad_parts.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sc::rig {

float grad_part(float grad, int rank, int ranks) {
  uint32_t u;
  std::memcpy(&u, &grad, sizeof u);
  const uint32_t exponent = (u >> 23) & 0xffu;
  const float zero = std::copysign(0.0f, grad);
  if (exponent == 0 || exponent == 0xffu) return rank == 0 ? grad : zero;
  // grad = sign * m * 2^(exponent - 150) with a 24-bit significand m; field `rank` of `ranks` is
  // the bits [24 - 24(rank+1)/ranks, 24 - 24rank/ranks) of m (empty for every rank >= 24 when
  // ranks > 24).
  const uint32_t m = (u & 0x7fffffu) | 0x800000u;
  const int hi = 24 - 24 * rank / ranks, lo = 24 - 24 * (rank + 1) / ranks;
  if (hi <= lo) return zero;
  const uint32_t mask = ((hi == 32 ? 0u : (1u << hi)) - 1u) & ~((1u << lo) - 1u);
  const uint32_t field = m & mask;
  if (field == 0) return zero;
  // field < 2^24 is exact in a float and the scaling by a power of two is exact too: the lowest
  // bit of m weighs 2^(exponent - 150) >= 2^-149, the smallest subnormal.
  return std::copysign(std::ldexp(static_cast<float>(field), static_cast<int>(exponent) - 150),
                       grad);
}

}  // namespace sc::rig
