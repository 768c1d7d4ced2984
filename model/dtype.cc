#include "model/dtype.h"

namespace sc::model {

int64_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
    case DType::kFloat64:
      return "fp64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "fp32" || name == "float32") return DType::kFloat32;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  if (name == "fp16" || name == "float16") return DType::kFloat16;
  if (name == "fp64" || name == "float64") return DType::kFloat64;
  return std::nullopt;
}

int mantissa_bits(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 23;
    case DType::kBFloat16: return 7;
    case DType::kFloat16: return 10;
    case DType::kFloat64: return 52;
  }
  return 0;
}

double max_finite(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 3.4028234663852886e38;
    case DType::kBFloat16: return 3.3895313892515355e38;
    case DType::kFloat16: return 65504.0;
    case DType::kFloat64: return 1.7976931348623157e308;
  }
  return 0;
}

double min_subnormal(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 1.401298464324817e-45;   // 2^-149
    case DType::kBFloat16: return 9.183549615799121e-41;  // 2^-133
    case DType::kFloat16: return 5.960464477539063e-08;   // 2^-24
    case DType::kFloat64: return 4.9406564584124654e-324;
  }
  return 0;
}

}  // namespace sc::model
