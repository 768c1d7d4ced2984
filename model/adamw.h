// AdamW with decoupled weight decay and bias correction: an fp64 oracle and two fp32
// emulations that reproduce, element by element, the operation order of LibTorch's CPU
// `torch::optim::AdamW` and of Transformer Engine's FusedAdam kernel (AdamW mode).
//
// LibTorch's order: p *= 1 - lr*wd; m = m*b1 + (1-b1)*g; v = v*b2 + (1-b2)*g*g;
// d = sqrt(v) / sqrt(bc2) + eps; p += -(lr/bc1) * m / d. Its vectorised kernels (AVX2, AVX512)
// fuse the two multiply-adds into FMAs, its default kernel does not: FmaMode selects which.
// FusedAdam's order: m, v as above without FMA; u = (m/bc1) / (sqrt(v/bc2) + eps) + wd*p;
// p = p - lr*u, with bias corrections bc = 1 - pow(beta, step) from the float betas the kernel
// receives (evaluated in double, stored as float); its step count is per group, not per parameter.
#pragma once

#include <cstdint>
#include <vector>

namespace sc::model {

// The hyper-parameters of one step of one group.
struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;

  friend bool operator==(const AdamWHyper& a, const AdamWHyper& b) {
    return a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps &&
           a.weight_decay == b.weight_decay;
  }
  friend bool operator!=(const AdamWHyper& a, const AdamWHyper& b) { return !(a == b); }
};

// Whether the multiply-adds of LibTorch's AdamW round once (fused) or twice.
enum class FmaMode { kSeparate, kFused };

// Moments and step count of one parameter (or piece) in fp32.
struct AdamWState32 {
  std::vector<float> exp_avg, exp_avg_sq;
  int64_t step = 0;
};

// Moments and step count in fp64.
struct AdamWState64 {
  std::vector<double> exp_avg, exp_avg_sq;
  int64_t step = 0;
};

// One LibTorch-order step of `param` with gradient `grad` (same size); increments state.step.
void adamw_step_torch(std::vector<float>& param, const std::vector<float>& grad,
                      AdamWState32& state, const AdamWHyper& hyper, FmaMode fma);
// One FusedAdam-order step with bias corrections for step `group_step` (the group's count).
void adamw_step_fused(std::vector<float>& param, const std::vector<float>& grad,
                      AdamWState32& state, const AdamWHyper& hyper, int64_t group_step);
// One fp64 step (the oracle); increments state.step.
void adamw_step_fp64(std::vector<double>& param, const std::vector<double>& grad,
                     AdamWState64& state, const AdamWHyper& hyper);

}  // namespace sc::model
