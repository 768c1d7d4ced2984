// Python attributes that Megatron hangs on tensors and LibTorch has no place for
// (`decoupled_grad`), kept in a side table keyed by tensor identity.
//
// Presence matters: Python's `getattr(t, "decoupled_grad", t.grad)` returns the attribute even
// when it holds None, so the table distinguishes "absent" from "present and undefined".
#pragma once

#include <map>

#include "sim/port/torch_pch.h"

namespace sc::sut {

// Side table of tensor attributes; one per simulated rank.
class TensorAttrs {
 public:
  // `t.decoupled_grad = g` (g may be undefined, Python's None).
  void set_decoupled_grad(const torch::Tensor& t, const torch::Tensor& g) {
    decoupled_grad_[t.unsafeGetTensorImpl()] = g;
  }
  // `hasattr(t, "decoupled_grad")`.
  bool has_decoupled_grad(const torch::Tensor& t) const {
    return decoupled_grad_.count(t.unsafeGetTensorImpl()) != 0;
  }
  // `t.decoupled_grad` (undefined when absent or None).
  torch::Tensor decoupled_grad(const torch::Tensor& t) const {
    auto it = decoupled_grad_.find(t.unsafeGetTensorImpl());
    return it == decoupled_grad_.end() ? torch::Tensor() : it->second;
  }
  // `getattr(t, "decoupled_grad", t.grad)`.
  torch::Tensor decoupled_grad_or_grad(const torch::Tensor& t) const {
    return has_decoupled_grad(t) ? decoupled_grad(t) : t.grad();
  }

 private:
  std::map<const void*, torch::Tensor> decoupled_grad_;
};

}  // namespace sc::sut
