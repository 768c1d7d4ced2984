#include "model/rounding.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sc::model {

float round_to_bf16(float value) {
  if (std::isnan(value)) return value;
  uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  float out;
  std::memcpy(&out, &u, sizeof out);
  return out;
}

float round_to_fp16(float value) {
  if (std::isnan(value) || std::isinf(value) || value == 0.0f) return value;
  const float a = std::fabs(value);
  // Largest finite half is 65504; values from 65520 on round to infinity.
  if (a >= 65520.0f) return std::copysign(INFINITY, value);
  int exp = 0;
  std::frexp(a, &exp);  // a = m * 2^exp, m in [0.5, 1)
  // Spacing of halves near a: 2^(exp - 11) for normals (exp >= -13), 2^-24 for subnormals.
  const int e = exp - 11 < -24 ? -24 : exp - 11;
  const float scaled = std::ldexp(a, -e);  // exact: a power-of-two scaling
  const float rounded = std::nearbyint(scaled);  // the default rounding mode: ties to even
  return std::copysign(std::ldexp(rounded, e), value);
}

float bf16_half_of_split_master(float value) {
  uint32_t u;
  std::memcpy(&u, &value, sizeof u);
  uint32_t hi = u >> 16;
  if ((u & 0xFFFFu) >= 0x8000u) hi = (hi + 1u) & 0xFFFFu;  // the format's wrap, as int16
  u = hi << 16;
  float out;
  std::memcpy(&out, &u, sizeof out);
  return out;
}

float round_to(DType dtype, float value) {
  switch (dtype) {
    case DType::kBFloat16:
      return round_to_bf16(value);
    case DType::kFloat16:
      return round_to_fp16(value);
    default:
      return value;
  }
}

}  // namespace sc::model
