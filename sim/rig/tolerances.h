// Every numerical tolerance of the suite, named and justified in one place.
//
// The default is exactness: where the port and the reference do the same fp32 operations in the
// same order (LibTorch's CPU AdamW against its emulation under the probed FMA mode, the port's
// FusedAdam kernel against the model's FusedAdam order, fp32 -> bf16/fp16 rounding), values are
// compared bit for bit, and no tolerance exists. The constants below cover only comparisons
// between different operation orders.
#pragma once

#include <cmath>

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

}  // namespace sc::tol
