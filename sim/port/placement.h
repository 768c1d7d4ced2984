// Where a tensor lives, host or accelerator, and Python's `t.to("cpu")` / `t.to("cuda")`.
//
// With a CUDA accelerator the answer is the tensor's device. With the CPU standing in for the
// accelerator every tensor is a CPU tensor, so a process-wide table names the storages that play
// host memory (the hybrid optimizer's host copies, host grads and the state made for them, state
// dicts mapped to the CPU) and every other storage plays accelerator memory. A storage's place is
// decided when it is made, as a device is, and views share it. `to_place` copies only when the
// place changes, as `.to()` does.
//
// Kernels check their operands with require_place(): on a device a kernel whose tensors are
// on two devices raises, and the simulated places raise the same way.
#pragma once

#include <functional>
#include <string>

#include "sim/port/torch_pch.h"

namespace sc::sut {

enum class Place { kHost, kAccelerator };

// "host" or "accelerator".
const char* place_name(Place place);

// Where `tensor` (defined) lives when the accelerator is `accelerator`.
Place place_of(const torch::Tensor& tensor, const torch::Device& accelerator);

// Records `tensor`'s storage as host memory (the CPU standing in for the accelerator; a no-op when
// the accelerator is CUDA, where a CPU tensor is host memory already). Returns `tensor`.
const torch::Tensor& mark_host(const torch::Tensor& tensor, const torch::Device& accelerator);

// `tensor.to("cpu")` (kHost) or `tensor.to("cuda")` (kAccelerator): `tensor` itself when it is
// there already, else a copy there.
torch::Tensor to_place(const torch::Tensor& tensor, Place place, const torch::Device& accelerator);

// `tensor.clone()`: a copy in the same place.
torch::Tensor clone_in_place(const torch::Tensor& tensor, const torch::Device& accelerator);

// Raises c10::Error, as a kernel launched on tensors on two devices does, when `tensor` (skipped
// when undefined), an operand of `kernel` that `what()` names, is not on `required`.
void require_place(const torch::Tensor& tensor, Place required, const torch::Device& accelerator,
                   const std::string& kernel, const std::function<std::string()>& what);

}  // namespace sc::sut
