// The key of a parameter's entry in a LibTorch optimizer's state.
#pragma once

#include "sim/port/torch_pch.h"

namespace sc::sut {

// LibTorch keys `Optimizer::state()` by the parameter's TensorImpl (a `void*`, since 2.2), as
// Python keys `optimizer.state` by the parameter itself.
inline void* optim_state_key(const torch::Tensor& param) { return param.unsafeGetTensorImpl(); }

// An optimizer step's closure, run with grad mode on (the step itself runs without): its loss,
// or an undefined tensor without a closure.
inline torch::Tensor closure_loss(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

}  // namespace sc::sut
