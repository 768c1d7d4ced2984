// The devices deterministic tests name: the CPU, which also plays the accelerator in a build
// or on a machine without CUDA.
#pragma once

#include "sim/port/torch_pch.h"

namespace sc {

inline const torch::Device kCpu{torch::kCPU};

}  // namespace sc
