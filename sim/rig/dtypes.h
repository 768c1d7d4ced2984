// Element types between the model's vocabulary and LibTorch's.
#pragma once

#include "model/dtype.h"
#include "sim/port/torch_pch.h"

namespace sc::rig {

// model::DType of a LibTorch scalar type (fp64 for anything unsupported).
model::DType to_model_dtype(torch::ScalarType type);
// LibTorch scalar type of a model::DType.
torch::ScalarType to_torch_dtype(model::DType dtype);

}  // namespace sc::rig
