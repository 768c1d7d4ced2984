// Python attributes that Megatron hangs on tensors and LibTorch has no place for
// (`decoupled_grad`), kept in a side table keyed by tensor identity.
//
// Presence matters: Python's `getattr(t, "decoupled_grad", t.grad)` returns the attribute even
// when it holds None, so the table distinguishes "absent" from "present and undefined".
#pragma once

#include <map>

#include "sim/port/torch_pch.h"

namespace sc::sut {

// A tensor's identity, as Python's `id(tensor)` keys dicts: its TensorImpl.
inline const void* tensor_key(const torch::Tensor& tensor) { return tensor.unsafeGetTensorImpl(); }

// Side table of tensor attributes; one per simulated rank.
class TensorAttrs {
 public:
  // `tensor.decoupled_grad = grad` (grad may be undefined, Python's None).
  void set_decoupled_grad(const torch::Tensor& tensor, const torch::Tensor& grad) {
    decoupled_grad_[tensor_key(tensor)] = grad;
  }
  // `hasattr(tensor, "decoupled_grad")`.
  bool has_decoupled_grad(const torch::Tensor& tensor) const {
    return decoupled_grad_.count(tensor_key(tensor)) != 0;
  }
  // `tensor.decoupled_grad` (undefined when absent or None).
  torch::Tensor decoupled_grad(const torch::Tensor& tensor) const {
    auto it = decoupled_grad_.find(tensor_key(tensor));
    return it == decoupled_grad_.end() ? torch::Tensor() : it->second;
  }
  // `getattr(tensor, "decoupled_grad", tensor.grad)`.
  torch::Tensor decoupled_grad_or_grad(const torch::Tensor& tensor) const {
    return has_decoupled_grad(tensor) ? decoupled_grad(tensor) : tensor.grad();
  }

 private:
  std::map<const void*, torch::Tensor> decoupled_grad_;
};

}  // namespace sc::sut
