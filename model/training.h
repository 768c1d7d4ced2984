// The training loop's view of the distributed optimizer: what one backward pass leaves in a
// parameter's main_grad, as Megatron's DistributedDataParallel delivers it.
//
// The loss is sum over parameters of (param * G).sum(), G a constant of the parameter's dtype:
// autograd hands each parameter exactly G as its `.grad`, and DDP's backward post-hook adds that
// into the parameter's `main_grad` (a view of the grad buffer, in the buffer's grad dtype), then
// sets `.grad` to None. A second backward with no zeroing in between adds again; the train step's
// zeroing (each model chunk's zero_grad_buffer, then the optimizer's zero_grad) starts from zero.
#pragma once

#include <vector>

#include "model/dtype.h"
#include "model/spec.h"
#include "model/step_inputs.h"

namespace sc::model {

// The gradient autograd delivers for a case gradient value `g`: G holds `g` in the parameter's
// dtype, and the product's backward multiplies by one, so it is `g` rounded to that dtype.
float backward_grad(DType param_dtype, float g);
// A step's inputs with every gradient as autograd delivers it (backward_grad), so that the step
// taken from main_grad sees what the backward pass left there.
StepInputs as_backward_delivers(const CaseSpec& spec, StepInputs in);

// `main_grad.add_(grad)` for one element: both widened to fp32, added in fp32, rounded once to
// the grad buffer's dtype (LibTorch's CPU add for bf16 and fp16 computes in float).
float accumulate_into_main_grad(DType grad_dtype, float main_grad, float grad);

// The main_grad of case parameter `param` after backward passes with case gradients `passes`
// (each the parameter's flat gradient, all of its size) since the last zeroing.
std::vector<float> main_grad_after(const CaseSpec& spec, int param,
                                   const std::vector<std::vector<float>>& passes);

}  // namespace sc::model
