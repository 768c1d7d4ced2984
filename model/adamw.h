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

// The elementwise square root of a contiguous fp32 tensor as the running PyTorch computes it
// (`exp_avg_sq.sqrt()`), in place. PyTorch 2.11's vectorised CPU sqrt is not correctly rounded
// (within 1 ulp; on a 1037-element tensor 164 roots differ from std::sqrt's), and which elements
// differ depends on their position in the tensor, so the model takes it as a primitive of the
// platform, applied to the whole moment at once. Null: std::sqrt per element.
using VectorSqrt = void (*)(std::vector<float>&);

// How the running PyTorch's CPU AdamW kernels round, as probed (sim/rig/fma_probe.h): whether
// the elementwise kernels of the single-tensor loop fuse their multiply-adds, their tensor
// sqrt, and the vector width of the fused kernel's body (its last `numel % width` elements run
// its scalar tail). The fused kernel's own sqrt is correctly rounded (std::sqrt).
struct TorchCpuKernels {
  FmaMode fma = FmaMode::kFused;
  VectorSqrt tensor_sqrt = nullptr;
  int fused_width = 8;
};

// One LibTorch-order step of `param` with gradient `grad` (same size); increments state.step.
// This is C++ `torch::optim::AdamW` and PyTorch 1.13's Python loop: m = m*b1 + (1-b1)*g.
void adamw_step_torch(std::vector<float>& param, const std::vector<float>& grad,
                      AdamWState32& state, const AdamWHyper& hyper, FmaMode fma,
                      VectorSqrt tensor_sqrt = nullptr);
// One step of PyTorch 2.11's `torch.optim.AdamW` single-tensor loop (the default on CPU
// tensors): as adamw_step_torch, except that m = lerp(m, g, 1-b1) (`exp_avg.lerp_`), which
// ATen computes as m + w*(g-m) for |w| < 0.5 and g - (g-m)*(1-w) otherwise, fused per `fma`.
// Bias corrections from the step as Python floats (double). Increments state.step.
void adamw_step_torch_single(std::vector<float>& param, const std::vector<float>& grad,
                             AdamWState32& state, const AdamWHyper& hyper,
                             const TorchCpuKernels& kernels);
// One step of PyTorch 2.11's fused CPU AdamW (`torch._fused_adamw_`, what Megatron's
// `fused=True` runs on CPU tensors). Scalars in double, each rounded to float once. Its vector
// body (the first numel - numel % width elements): p *= 1-lr*wd; m = fma(w, g-m, m) (w = 1-b1;
// fma(w-1, g-m, g) when |w| >= 0.5); v = fma((1-b2)*g, g, v*b2); d = sqrt(v)/sqrt(bc2) + eps;
// p = p + (-(lr/bc1)*m)/d. Its scalar tail as compiled in the wheel: the same but
// v = fma(v, b2, ((1-b2)*g)*g). Increments state.step.
void adamw_step_torch_fused_cpu(std::vector<float>& param, const std::vector<float>& grad,
                                AdamWState32& state, const AdamWHyper& hyper, int width);
// One step of PyTorch 2.11's foreach AdamW on CUDA tensors (`_multi_tensor_adamw`, torch's
// default there), as its `_foreach_*` CUDA kernels round: each works in float with its scalar
// rounded to float once. p *= 1-lr*wd; m = lerp(m, g, 1-b1) as nvcc contracts it (fma(w, g-m, m)
// for |w| < 0.5); v *= b2; v = fma(1-b2, g*g, v) (addcmul's explicit fma); d = sqrt(v) /
// sqrt(bc2) + eps, one rounding each (CUDA's sqrtf and float division round correctly);
// p = fma(-lr/bc1, m/d, p) (addcdiv's explicit fma). Bias corrections from the step as Python
// floats (double), as on the CPU. Increments state.step.
void adamw_step_torch_foreach_cuda(std::vector<float>& param, const std::vector<float>& grad,
                                   AdamWState32& state, const AdamWHyper& hyper);
// One step of `torch._fused_adamw_` on CUDA tensors (the hybrid optimizer's accelerator side
// without Transformer Engine). Every scalar is cast to float first; bc1 = 1 - powf(b1, step),
// bc2s = sqrtf(1 - powf(b2, step)) in float. Per element: p -= (lr*wd)*p as nvcc contracts it
// (fma(-(lr*wd), p, p)); m = fma(b1, m, fma(-b1, g, g)); v = fma(b2, v, fma(-b2, g*g, g*g))
// (explicit fmas); d = sqrt(v)/bc2s + eps; p -= ((lr/bc1)*m)/d. Increments state.step.
void adamw_step_torch_fused_cuda(std::vector<float>& param, const std::vector<float>& grad,
                                 AdamWState32& state, const AdamWHyper& hyper);
// One FusedAdam-order step with bias corrections for step `group_step` (the group's count).
void adamw_step_fused(std::vector<float>& param, const std::vector<float>& grad,
                      AdamWState32& state, const AdamWHyper& hyper, int64_t group_step);
// One fp64 step (the oracle); increments state.step.
void adamw_step_fp64(std::vector<double>& param, const std::vector<double>& grad,
                     AdamWState64& state, const AdamWHyper& hyper);

}  // namespace sc::model
