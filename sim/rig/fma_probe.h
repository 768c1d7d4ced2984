// Which FMA mode LibTorch's C++ `torch::optim::AdamW` uses on this machine (its AVX2/AVX512
// kernels fuse the multiply-adds, its default kernel does not), found by stepping a probe tensor
// and comparing with both emulations of the model (with this PyTorch's tensor sqrt).
#pragma once

#include <optional>

#include "model/adamw.h"

namespace sc::rig {

// The mode whose emulation reproduces LibTorch bit for bit on a 1037-element probe over three
// steps, or nullopt when neither does (then the CPU comparison cannot be exact: a finding).
std::optional<model::FmaMode> torch_cpu_fma_mode();

// How torch 2.11's Python AdamW kernels round on this machine (the port's sut::TorchAdamW runs
// them): the FMA mode of the single-tensor loop and the vector width of `_fused_adamw_`'s body,
// found by stepping a 1037-element probe three times with each and comparing with the model's
// emulations; nullopt when no candidate reproduces both (a finding: the comparison cannot be
// exact).
std::optional<model::TorchCpuKernels> torch_cpu_kernels();

// model::VectorSqrt of this PyTorch: `torch.sqrt` of the values as one contiguous CPU tensor.
void torch_tensor_sqrt(std::vector<float>& values);

}  // namespace sc::rig
