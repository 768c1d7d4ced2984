#include "sim/rig/dtypes.h"

namespace sc::rig {

model::DType to_model_dtype(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat:
      return model::DType::kFloat32;
    case torch::kBFloat16:
      return model::DType::kBFloat16;
    case torch::kHalf:
      return model::DType::kFloat16;
    default:
      return model::DType::kFloat64;
  }
}

torch::ScalarType to_torch_dtype(model::DType dtype) {
  switch (dtype) {
    case model::DType::kFloat32:
      return torch::kFloat;
    case model::DType::kBFloat16:
      return torch::kBFloat16;
    case model::DType::kFloat16:
      return torch::kHalf;
    case model::DType::kFloat64:
      return torch::kDouble;
  }
  return torch::kFloat;
}

}  // namespace sc::rig
