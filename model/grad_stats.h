// The gradient statistics of one step of one instance, as intended: the main grads the
// optimizer steps with, their global L2 norm with every element counted once (the DP ranks'
// shards partition each parameter, and a norm over the grad-stats group adds them all), the clip
// coefficient, and the number of zeros.
#pragma once

#include <cstdint>
#include <vector>

#include "model/dtype.h"
#include "model/shard.h"
#include "model/spec.h"
#include "model/step_inputs.h"

namespace sc::model {

// The main grad's dtype: fp32 (`.grad = shard_grad.float()`), or, precision-aware, the grad
// buffer's (`.decoupled_grad = shard_grad`).
DType main_grad_dtype(const CaseSpec& spec, const ParamSpec& param);

// One main-grad element from the DP-reduced gradient `x`: rounded to the grad buffer's dtype,
// multiplied by `in.inv_scale` (unless 1) and by `in.clip_coeff` (when below 1), each product
// rounded to the main grad's dtype. The clip coefficient is a Python float, which PyTorch 2.11
// multiplies a 16-bit tensor by as an fp32, on CUDA and on the CPU alike (1.13's CPU kernels
// rounded it to the tensor's dtype first).
float main_grad(const CaseSpec& spec, const ParamSpec& param, float x, const StepInputs& in);

// The L2 norm of the unscaled main grads (before clipping) of every parameter of `instance`,
// each element squared and summed in double.
double exact_grad_norm(const CaseSpec& spec, Instance instance, const StepInputs& in);

// The same for one parameter `param` alone.
double exact_param_grad_norm(const CaseSpec& spec, size_t param, const StepInputs& in);

// What the norm's rounding depends on: the largest parameter's element count, the number of
// parameters and of elements, the main grads' dtype with the fewest mantissa bits, and whether
// some main grad is fp16, over `instance`.
struct GradNormShape {
  int64_t largest = 0;
  int64_t tensors = 0;
  int64_t elements = 0;
  DType dtype = DType::kFloat32;
  bool has_fp16 = false;
  // The largest smallest-subnormal among the main grads' dtypes: each tensor's norm is rounded
  // to its own grad's dtype, so an fp16 grad beside a bf16 one rounds at fp16's spacing (2^-24)
  // although bf16 has the fewer mantissa bits.
  double min_subnormal = 0;
};
GradNormShape grad_norm_shape(const CaseSpec& spec, Instance instance);

// The p-norm of every element of `tensors` taken as one vector (p > 0, or infinity: the largest
// magnitude), computed in double: (sum of |x|^p)^(1/p). What `get_grad_norm_fp32(grads,
// norm_type)` is for, whichever ranks hold which grads.
double exact_p_norm(const std::vector<std::vector<float>>& tensors, double p);

// Megatron's clip coefficient: `max_norm / (total_norm + 1e-6)`, applied when below 1.
double clip_coefficient(double max_norm, double total_norm);

// The number of main-grad elements of `instance` equal to zero (either sign) after unscaling
// and clipping.
int64_t zeros_in_main_grads(const CaseSpec& spec, Instance instance, const StepInputs& in);

}  // namespace sc::model
