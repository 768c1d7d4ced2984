// One pass of torch 2.11's fused CPU AdamW (`torch._fused_adamw_`, what Megatron's `fused=True`
// host AdamW runs) over fp32 arrays: read the parameter, grad and both moments once, write the
// parameter and both moments once (28 bytes per element), every element with exactly the fp32
// operations, in exactly the order, of that kernel's vector body or of its scalar tail
// (`model::adamw_step_torch_fused_cpu` describes both). No LibTorch here: this file is compiled
// alone, vectorised, and dispatched on the CPU's instruction set at run time.
#pragma once

#include <cstdint>

namespace sc::engines {

// The fp32 scalars one step of one parameter uses, as the fused kernel rounds them (computed in
// double, then rounded to float once).
struct AdamWScalars {
  bool apply_decay = false;  // weight_decay != 0: p *= decay first
  float decay = 1.0f;        // 1 - lr * weight_decay
  float lerp_weight = 0.1f;  // 1 - beta1: m = lerp(m, g, lerp_weight)
  bool lerp_small = true;    // |lerp_weight| < 0.5: lerp from m, else from g
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float sqrt_bias_correction2 = 1.0f;  // sqrt(1 - beta2^step)
  float eps = 1e-8f;
  float neg_step_size = -1e-3f;  // -(lr / (1 - beta1^step))
};

// The scalars for step `step` (1-based) of a parameter with these hyper-parameters.
AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step);

// One step over elements [0, count) in place: elements before `tail_from` as the fused kernel's
// vector body computes them, the others as its scalar tail does (a tensor's last numel % width
// elements, width as probed: fused_host_adamw.h). Bit-identical to the kernel for every count,
// 0 included.
void adamw_step_span(float* __restrict param, const float* __restrict grad,
                     float* __restrict exp_avg, float* __restrict exp_avg_sq, int64_t count,
                     const AdamWScalars& scalars, int64_t tail_from);

// Elements per task where a step's elements are split over LibTorch's intra-op threads: large
// enough that a task costs far more than scheduling it, small enough that two threads share a
// 100k-element tensor.
inline constexpr int64_t kAdamWParallelGrain = int64_t{1} << 15;

// The instruction set the kernel dispatches to on this CPU: "avx512", "avx2" or "baseline".
const char* adamw_kernel_isa();

}  // namespace sc::engines
