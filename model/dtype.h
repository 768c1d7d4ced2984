// Element types the shard builder distinguishes, with Megatron's names.
//
// Only fp32, bf16 and fp16 are valid model-parameter dtypes for the distributed optimizer; fp64
// exists so that the builder's TypeError branch can be exercised. Parsing is total: an unknown
// name yields std::nullopt, never a default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sc::model {

// A tensor element type.
enum class DType { kFloat32, kBFloat16, kFloat16, kFloat64 };

// Bytes per element of `dtype`.
int64_t element_size(DType dtype);
// Short lower-case name: "fp32", "bf16", "fp16", "fp64".
std::string dtype_name(DType dtype);
// Inverse of dtype_name; also accepts "float32", "bfloat16", "float16", "float64".
std::optional<DType> parse_dtype(std::string_view name);
// Stored mantissa bits of `dtype` (23, 7, 10, 52): one ulp at 1 is 2^-mantissa_bits.
int mantissa_bits(DType dtype);
// The largest finite value of `dtype`, and its smallest positive (subnormal) one.
double max_finite(DType dtype);
double min_subnormal(DType dtype);
// True for the 16-bit float types (Megatron's float16 branch: HalfTensor or BFloat16Tensor).
inline bool is_float16(DType dtype) {
  return dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

}  // namespace sc::model
