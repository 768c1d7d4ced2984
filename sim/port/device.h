// Accelerator selection and Megatron's tensor type strings for the port.
//
// The accelerator is CUDA only when the build has CUDA and LibTorch sees a device; otherwise it
// is the CPU, and tensors on it play the part of CUDA tensors. megatron_type() therefore names a
// tensor on the accelerator "torch.cuda.<T>Tensor" whatever its real device is.
#pragma once

#include <string>

#include "sim/port/torch_pch.h"

namespace sc::sut {

// CUDA when compiled with it and a device is visible, else CPU.
torch::Device pick_device();
// Why pick_device() returned CPU ("" when it returned CUDA).
std::string cpu_fallback_reason();
// Python's `tensor.type()` for `tensor`, with `accelerator` standing for "cuda".
std::string megatron_type(const torch::Tensor& tensor, const torch::Device& accelerator);
// LibTorch version string, e.g. "1.13.1".
std::string torch_version();

}  // namespace sc::sut
