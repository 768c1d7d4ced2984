// Every numerical tolerance of the suite, named and justified in one place.
//
// The default is exactness: where the port and the reference do the same fp32 operations in the
// same order (torch 2.11's single-tensor and fused CPU AdamW against their emulations under the
// probed FMA mode and vector width, with torch's own tensor sqrt where the single-tensor loop
// uses it; the port's FusedAdam kernel against the model's FusedAdam order; fp32 -> bf16/fp16
// rounding), values are compared bit for bit, and no tolerance exists. The constants below
// cover only comparisons between different operation orders.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sc::tol {

// Two AdamW implementations with different operation orders (LibTorch's CPU AdamW and
// FusedAdam), one step. Both compute an update lr * (m_hat / (sqrt(v_hat) + eps) + wd * p), but
// (1) LibTorch forms 1 - beta in double and rounds it to fp32, FusedAdam subtracts the fp32 beta
//     from 1 in fp32: for beta2 = 0.999 the two (1 - beta2) differ by 1.3e-5 relative, which
//     moves sqrt(v_hat), hence the update, by half that; for beta1 = 0.9 by 2.3e-7;
// (2) each also rounds about 12 times (2^-24 relative each) in a different order.
// |m_hat / (sqrt(v_hat) + eps)| <= (1 - b1) / sqrt(1 - b2) / bias corrections stays near 3.2 or
// below for betas (0.9, 0.999); with |p| <= 2 and wd <= 0.1 the factor is below kMaxRatio = 4.
inline constexpr double kMaxRatio = 4.0;

// Relative bound on the difference of one step's update between the two orders.
inline double op_order_update_rel(double beta1, double beta2) {
  auto coefficient_gap = [](double beta) {
    const double in_fp32 = 1.0 - static_cast<double>(static_cast<float>(beta));
    const double rounded = static_cast<double>(static_cast<float>(1.0 - beta));
    return std::fabs(in_fp32 - rounded) / (1.0 - beta);
  };
  return kMaxRatio * (coefficient_gap(beta1) + coefficient_gap(beta2) / 2 + 12 * std::ldexp(1.0, -24));
}

// Largest difference allowed between two fp32 masters stepped `steps` times with learning rates
// up to `lr_max` by the two orders. Per step: the update bound above (the moments carry the gap
// from step to step but do not grow it: they are averages of the same gradients), plus the
// roundings of the parameter itself, which differ in number: LibTorch rounds p twice per step
// (p * (1 - lr * wd), then p + update), FusedAdam once (p - lr * (ratio + wd * p)); each rounding
// is at most half an ulp, so the two results differ by at most 1.5 ulp, bounded by 2^-22 |p|.
inline double op_order_fp32(double value, double lr_max, int steps, double beta1 = 0.9,
                            double beta2 = 0.999) {
  return steps * (lr_max * op_order_update_rel(beta1, beta2) + std::ldexp(std::fabs(value), -22));
}

// The same for a 16-bit model parameter: the masters may differ as above, and two masters on
// either side of a rounding boundary round one unit in the last place apart, so one ulp of the
// 16-bit type (2^-7 relative for bf16, 2^-10 for fp16, `mantissa_bits`) is added.
inline double op_order_16bit(double value, double lr_max, int steps, int mantissa_bits) {
  return op_order_fp32(value, lr_max, steps) + std::ldexp(std::fabs(value), -mantissa_bits) +
         std::ldexp(1.0, -24);
}

// torch 2.11's two CPU AdamW kernels against each other: the single-tensor loop (the plain
// distributed optimizer's AdamW) and `_fused_adamw_` (the hybrid optimizer's `fused=True`). Both
// take the same fp32 scalars and the same lerp for m, so m is identical; they differ in
// (1) v: the fused kernel's scalar tail rounds v*b2 inside its FMA where the loop rounds it
//     first, at most 2^-24 relative more per step, carried by the average into later steps
//     (v after k steps: at most 2k u apart, u = 2^-24);
// (2) the root: the loop's vectorised tensor sqrt is within 1 ulp of the correctly rounded one
//     the fused kernel takes (2u), and sqrt halves v's gap: denominators at most (k + 2) u apart;
// (3) hence the step's update, at most lr * kMaxRatio * (k + 2) u apart at step k, then one
//     rounding of the parameter more or less on either side (2^-23 |p|).
// Summed over the steps: lr_max kMaxRatio u (steps (steps + 1) / 2 + 2 steps) + steps 2^-23 |p|.
inline double torch_kernels_fp32(double value, double lr_max, int steps) {
  const double s = steps;
  return lr_max * kMaxRatio * std::ldexp(s * (s + 1) / 2 + 2 * s, -24) +
         s * std::ldexp(std::fabs(value), -23);
}

// The same for a 16-bit model parameter: masters on either side of a rounding boundary round
// one spacing of the 16-bit type apart: |value| 2^-mantissa_bits (7 for bf16, 10 for fp16), or,
// among the type's subnormals, their fixed spacing `min_subnormal` (2^-24 for fp16, 2^-133 for
// bf16), which is larger there: fp16 values near 2e-5 lie 5.96e-8 apart, not 1.9e-8.
inline double torch_kernels_16bit(double value, double lr_max, int steps, int mantissa_bits,
                                  double min_subnormal) {
  return torch_kernels_fp32(value, lr_max, steps) +
         std::max(std::ldexp(std::fabs(value), -mantissa_bits), min_subnormal);
}

// DeepSpeed's DeepSpeedCPUAdam (AdamW mode, the benchmarks' peer) against the fp64 oracle
// (model::adamw_step_fp64), one step from zero moments. DeepSpeed takes lr, the betas, eps and
// the weight decay as fp32, forms 1 - beta by subtracting the fp32 beta from 1 in fp32 (its bias
// corrections are fp32 running products of the fp32 betas), and multiplies by an fp32
// 1 / sqrt(1 - beta2^t) where torch divides by the root. So against the exact one step:
// (1) m = (1 - b1) g: the fp32 1 - b1 is off by gap(b1) relative (gap(b) = |1 - fp32(b) -
//     (1 - b)| / (1 - b): 2.4e-7 for 0.9), and one rounding of that: gap(b1) + u (1 + gap),
//     u = 2^-24 (on the test's input the largest difference is 0.99 of this bound);
// (2) v = (1 - b2) g^2: gap(b2) (1.3e-5 for 0.999) and two roundings: gap(b2) + 2u (1 + gap)
//     (0.9995 of it on the test's input);
// (3) the update lr m_hat / (sqrt(v_hat) + eps): the two gaps cancel in m / (1 - b1), the root
//     halves v's, so the update is off by gap(b2) / 2 plus at most 12 roundings along its path
//     (m, g^2, v, the root, 1 - b2^t and its root and reciprocal, the product, + eps, the
//     quotient, lr / bc1 and its product), 12u, of the update's size (0.86 of the bound on the
//     test's input);
// (4) the parameter: the decay p + (-lr wd) p and the final add round at |p|'s scale, 2u |p|
//     (|p| the larger of the values before and after).
inline double deepspeed_gap(double beta) {
  return std::fabs((1.0 - static_cast<double>(static_cast<float>(beta))) - (1.0 - beta)) /
         (1.0 - beta);
}
// k roundings of a value that is itself off by `gap`: each at most u of the rounded value.
inline double deepspeed_rounded(double gap, int k) {
  const double u = std::ldexp(1.0, -24);
  return gap + k * u * (1 + gap) * (1 + u);
}
inline double deepspeed_one_step_exp_avg(double exact, double beta1) {
  return std::fabs(exact) * deepspeed_rounded(deepspeed_gap(beta1), 1);
}
inline double deepspeed_one_step_exp_avg_sq(double exact, double beta2) {
  return std::fabs(exact) * deepspeed_rounded(deepspeed_gap(beta2), 2);
}
inline double deepspeed_one_step_param(double p_before, double p_exact, double update_exact,
                                       double beta2) {
  return std::fabs(update_exact) * (deepspeed_gap(beta2) / 2 + std::ldexp(12.0, -24)) +
         std::ldexp(2.0, -24) * std::max(std::fabs(p_before), std::fabs(p_exact));
}

// The global grad norm on Megatron's path without Transformer Engine and Apex
// (sut::get_grad_norm_fp32) against the exact one (model::exact_grad_norm: every main-grad
// element squared and summed in double). The summation orders are LibTorch's and cannot be
// reproduced, so the bound is the worst case of any order, to first order in u = 2^-24. PyTorch
// 2.11's `torch.norm` (`linalg.vector_norm`) accumulates every dtype's squares in fp32, on the
// CPU and on CUDA (1.13's CPU norm accumulated fp16 in fp16: ones(1000) * 3 gave 90.75 for
// 94.87; 2.11 gives 94.875, the fp32 norm rounded to fp16):
// (1) one tensor's norm: a sum of n non-negative squares accumulated in any order is off by at
//     most n u relative (the squares' roundings included), its square root by half that, plus
//     the root's rounding: n u / 2 + u; `largest` is the largest tensor's n;
// (2) that norm rounded to the main grad's dtype (precision-aware decoupled grads are bf16 or
//     fp16): half an ulp, u_d = 2^-(mantissa_bits + 1);
// (3) the norm of the `tensors` per-tensor norms, in the same dtype: tensors u / 2 + u + u_d;
// (4) the square in fp32 doubles the relative error and adds u; the SUM over `ranks` adds
//     ranks u to the square; the square root in double halves it all again.
// Together: (largest + tensors) u / 2 + (ranks / 2 + 3) u + 2 u_d. The exact side's double sum
// adds elements 2^-52. Where (largest + tensors) u reaches 1/2 first order means nothing and
// no bound is given (infinity). Squares below fp32's range underflow: each loses at most half
// its smallest subnormal s_a = 2^-149, the norm at most sqrt(elements s_a / 2); and each
// rounded norm loses up to half the main grad's smallest subnormal s_d (2^-149, 2^-133 for
// bf16, 2^-24 for fp16) where it is tiny.
struct GradNormTerms {
  int64_t largest = 0, tensors = 0, elements = 0, ranks = 1;
  int grad_mantissa_bits = 23;        // the main grads' dtype (the fewest bits among them)
  // s_d: the largest smallest-subnormal among the main grads' dtypes (each tensor's norm is
  // rounded to its own grad's dtype: fp16's 2^-24 wherever one grad is fp16)
  double grad_min_subnormal = 0;
};

inline double grad_norm(double exact, const GradNormTerms& t) {
  const double u = std::ldexp(1.0, -24), u_d = std::ldexp(1.0, -(t.grad_mantissa_bits + 1));
  const double s_a = std::ldexp(1.0, -149);
  const double terms = static_cast<double>(t.largest + t.tensors);
  if (terms * u >= 0.5) return std::numeric_limits<double>::infinity();
  const double rel = terms * u / 2 + (static_cast<double>(t.ranks) / 2 + 3) * u + 2 * u_d +
                     static_cast<double>(t.elements) * std::ldexp(1.0, -52);
  const double abs = std::sqrt(static_cast<double>(t.elements) * s_a / 2) +
                     static_cast<double>(t.tensors + 1) * t.grad_min_subnormal / 2;
  return rel * exact + abs;
}

// A direct `get_grad_norm_fp32(grads, p)` call with p neither 2 nor infinity (sut::
// grad_norm_share) against model::exact_p_norm, over fp32 grads whose magnitudes are zero or in
// [2^-8, 2^8] (no term of any p up to 4 underflows or overflows). To first order in u = 2^-24:
// (1) `torch.norm(grad, p)` sums n terms |x|^p, each off by one ulp (2 u: powf is faithful, not
//     correctly rounded), in any order (n u), then takes the 1/p-th power (error / p, plus 2 u);
// (2) `** p` multiplies that relative error by p and adds 2 u: (n + 2) u + 2 p u + 2 u;
// (3) the terms of `tensors` grads and of `ranks` shares are added in fp32: (tensors + ranks) u;
// (4) `.item() ** (1 / p)` in double divides it all by p.
// Together ((largest + tensors + ranks + 4) / p + 2) u relative, with `largest` the largest
// grad's n; the exact side's double sum adds elements 2^-52. The inf norm is exact (the largest
// magnitude is one of the values, carried through fp32 and double unchanged) and p = 2 follows
// Megatron's L2 path, bounded by grad_norm above.
inline double direct_p_norm(double exact, double p, const GradNormTerms& t) {
  const double u = std::ldexp(1.0, -24);
  const double terms = static_cast<double>(t.largest + t.tensors + t.ranks + 4);
  return (terms / p + 2) * u * exact +
         static_cast<double>(t.elements) * std::ldexp(1.0, -52) * exact;
}

}  // namespace sc::tol
