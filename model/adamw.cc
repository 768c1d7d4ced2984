#include "model/adamw.h"

#include <cassert>
#include <cmath>

namespace sc::model {

namespace {

void init_moments(std::vector<float>& param, AdamWState32& state) {
  if (state.exp_avg.size() != param.size()) {
    state.exp_avg.assign(param.size(), 0.0f);
    state.exp_avg_sq.assign(param.size(), 0.0f);
  }
}

// ATen's lerp(m, g, w) with a float weight: from m for small weights, from g for large ones.
float lerp(float m, float g, float w, bool fused) {
  if (std::fabs(w) < 0.5f) return fused ? std::fma(w, g - m, m) : m + w * (g - m);
  const float d = g - m, c = 1.0f - w;
  return fused ? std::fma(-d, c, g) : g - d * c;
}

// `denom = (exp_avg_sq.sqrt() / sqrt_bc2).add_(eps); param.addcdiv_(exp_avg, denom,
// value=-lr/bc1)`, with the tensor sqrt of the running PyTorch.
void apply_update(std::vector<float>& param, const AdamWState32& state, const AdamWHyper& hyper,
                  float sqrt_bc2, double bc1, VectorSqrt tensor_sqrt) {
  std::vector<float> root = state.exp_avg_sq;
  if (tensor_sqrt) {
    tensor_sqrt(root);
  } else {
    for (float& x : root) x = std::sqrt(x);
  }
  const float eps = static_cast<float>(hyper.eps);
  const float step_size = static_cast<float>(-(hyper.lr / bc1));
  for (size_t i = 0; i < param.size(); ++i) {
    const float denom = root[i] / sqrt_bc2 + eps;
    param[i] = param[i] + (step_size * state.exp_avg[i]) / denom;
  }
}

// The scalars of one step of torch 2.11's AdamW, from the Python floats, each rounded to float
// where the kernels take it (state.step already advanced).
struct TorchStepScalars {
  double bc1, bc2;
  float decay, w, b2, a2;
};

TorchStepScalars torch_step_scalars(const AdamWHyper& hyper, int64_t step) {
  TorchStepScalars s;
  s.bc1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(step));
  s.bc2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(step));
  s.decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  s.w = static_cast<float>(1.0 - hyper.beta1);
  s.b2 = static_cast<float>(hyper.beta2);
  s.a2 = static_cast<float>(1.0 - hyper.beta2);
  return s;
}

}  // namespace

void adamw_step_torch(std::vector<float>& param, const std::vector<float>& grad,
                      AdamWState32& state, const AdamWHyper& hyper, FmaMode fma,
                      VectorSqrt tensor_sqrt) {
  assert(param.size() == grad.size());
  if (state.exp_avg.size() != param.size()) {
    state.exp_avg.assign(param.size(), 0.0f);
    state.exp_avg_sq.assign(param.size(), 0.0f);
  }
  state.step += 1;
  const double bc1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(state.step));
  const double bc2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(state.step));
  // Scalars reach the fp32 kernels as fp32.
  const float decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  const float b1 = static_cast<float>(hyper.beta1), a1 = static_cast<float>(1.0 - hyper.beta1);
  const float b2 = static_cast<float>(hyper.beta2), a2 = static_cast<float>(1.0 - hyper.beta2);
  const bool fused = fma == FmaMode::kFused;
  for (size_t i = 0; i < param.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    if (hyper.weight_decay != 0.0) param[i] = param[i] * decay;
    m = m * b1;
    m = fused ? std::fma(a1, grad[i], m) : m + a1 * grad[i];
    v = v * b2;
    const float ag = a2 * grad[i];
    v = fused ? std::fma(ag, grad[i], v) : v + ag * grad[i];
  }
  apply_update(param, state, hyper, static_cast<float>(std::sqrt(bc2)), bc1, tensor_sqrt);
}

void adamw_step_torch_single(std::vector<float>& param, const std::vector<float>& grad,
                             AdamWState32& state, const AdamWHyper& hyper,
                             const TorchCpuKernels& kernels) {
  assert(param.size() == grad.size());
  init_moments(param, state);
  state.step += 1;
  const TorchStepScalars s = torch_step_scalars(hyper, state.step);
  const bool fused = kernels.fma == FmaMode::kFused;
  for (size_t i = 0; i < param.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    if (hyper.weight_decay != 0.0) param[i] = param[i] * s.decay;
    m = lerp(m, grad[i], s.w, fused);
    v = v * s.b2;
    const float ag = s.a2 * grad[i];
    v = fused ? std::fma(ag, grad[i], v) : v + ag * grad[i];
  }
  // Python's `bias_correction2**0.5`: pow, not sqrt (they differ in the last bit for some steps).
  apply_update(param, state, hyper, static_cast<float>(std::pow(s.bc2, 0.5)), s.bc1,
               kernels.tensor_sqrt);
}

void adamw_step_torch_fused_cpu(std::vector<float>& param, const std::vector<float>& grad,
                                AdamWState32& state, const AdamWHyper& hyper, int width) {
  assert(param.size() == grad.size() && width > 0);
  init_moments(param, state);
  state.step += 1;
  const TorchStepScalars s = torch_step_scalars(hyper, state.step);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(s.bc2));
  const float eps = static_cast<float>(hyper.eps);
  const float neg_step_size = static_cast<float>(-(hyper.lr / s.bc1));
  const size_t body = param.size() - param.size() % static_cast<size_t>(width);
  for (size_t i = 0; i < param.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    const float g = grad[i];
    if (hyper.weight_decay != 0.0) param[i] = param[i] * s.decay;
    m = lerp(m, g, s.w, true);
    v = i < body ? std::fma(s.a2 * g, g, v * s.b2) : std::fma(v, s.b2, (s.a2 * g) * g);
    const float denom = std::sqrt(v) / sqrt_bc2 + eps;
    param[i] = param[i] + (neg_step_size * m) / denom;
  }
}

void adamw_step_torch_foreach_cuda(std::vector<float>& param, const std::vector<float>& grad,
                                   AdamWState32& state, const AdamWHyper& hyper) {
  assert(param.size() == grad.size());
  init_moments(param, state);
  state.step += 1;
  const TorchStepScalars s = torch_step_scalars(hyper, state.step);
  const float sqrt_bc2 = static_cast<float>(std::pow(s.bc2, 0.5));
  const float eps = static_cast<float>(hyper.eps);
  const float neg_step_size = static_cast<float>((hyper.lr / s.bc1) * -1);
  for (size_t i = 0; i < param.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    const float g = grad[i];
    if (hyper.weight_decay != 0.0) param[i] = param[i] * s.decay;
    m = lerp(m, g, s.w, true);
    v = v * s.b2;
    v = std::fma(s.a2, g * g, v);
    const float denom = std::sqrt(v) / sqrt_bc2 + eps;
    param[i] = std::fma(neg_step_size, m / denom, param[i]);
  }
}

void adamw_step_torch_fused_cuda(std::vector<float>& param, const std::vector<float>& grad,
                                 AdamWState32& state, const AdamWHyper& hyper) {
  assert(param.size() == grad.size());
  init_moments(param, state);
  state.step += 1;
  const float lr = static_cast<float>(hyper.lr), wd = static_cast<float>(hyper.weight_decay);
  const float b1 = static_cast<float>(hyper.beta1), b2 = static_cast<float>(hyper.beta2);
  const float eps = static_cast<float>(hyper.eps);
  const float step = static_cast<float>(state.step);
  const float bc1 = 1.0f - std::pow(b1, step);
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(b2, step));
  const float step_size = lr / bc1;
  for (size_t i = 0; i < param.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    const float g = grad[i];
    if (wd != 0.0f) param[i] = std::fma(-(lr * wd), param[i], param[i]);
    m = std::fma(b1, m, std::fma(-b1, g, g));
    const float gg = g * g;
    v = std::fma(b2, v, std::fma(-b2, gg, gg));
    const float denom = std::sqrt(v) / bc2_sqrt + eps;
    param[i] = param[i] - (step_size * m) / denom;
  }
}

void adamw_step_fused(std::vector<float>& param, const std::vector<float>& grad,
                      AdamWState32& state, const AdamWHyper& hyper, int64_t group_step) {
  assert(param.size() == grad.size());
  if (state.exp_avg.size() != param.size()) {
    state.exp_avg.assign(param.size(), 0.0f);
    state.exp_avg_sq.assign(param.size(), 0.0f);
  }
  state.step = group_step;
  const float b1 = static_cast<float>(hyper.beta1), b2 = static_cast<float>(hyper.beta2);
  // TE's host code: float betas, `1 - pow(beta, step)` evaluated in double, stored as float.
  const float bc1 = static_cast<float>(1.0 - std::pow(double{b1}, static_cast<double>(group_step)));
  const float bc2 = static_cast<float>(1.0 - std::pow(double{b2}, static_cast<double>(group_step)));
  const float eps = static_cast<float>(hyper.eps), lr = static_cast<float>(hyper.lr);
  const float wd = static_cast<float>(hyper.weight_decay);
  for (size_t i = 0; i < param.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    const float gi = grad[i];
    // Separate roundings (the build compiles with -ffp-contract=off; so do the port's kernels).
    m = b1 * m + (1.0f - b1) * gi;
    v = b2 * v + (1.0f - b2) * gi * gi;
    const float m_hat = m / bc1;
    const float v_hat = v / bc2;
    const float denom = std::sqrt(v_hat) + eps;
    const float ratio = m_hat / denom;
    const float update = ratio + wd * param[i];
    const float delta = lr * update;
    param[i] = param[i] - delta;
  }
}

void adamw_step_fp64(std::vector<double>& param, const std::vector<double>& grad,
                     AdamWState64& state, const AdamWHyper& hyper) {
  if (state.exp_avg.size() != param.size()) {
    state.exp_avg.assign(param.size(), 0.0);
    state.exp_avg_sq.assign(param.size(), 0.0);
  }
  state.step += 1;
  const double bc1 = 1.0 - std::pow(hyper.beta1, static_cast<double>(state.step));
  const double bc2 = 1.0 - std::pow(hyper.beta2, static_cast<double>(state.step));
  for (size_t i = 0; i < param.size(); ++i) {
    double& m = state.exp_avg[i];
    double& v = state.exp_avg_sq[i];
    param[i] *= 1.0 - hyper.lr * hyper.weight_decay;
    m = hyper.beta1 * m + (1.0 - hyper.beta1) * grad[i];
    v = hyper.beta2 * v + (1.0 - hyper.beta2) * grad[i] * grad[i];
    param[i] -= (hyper.lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + hyper.eps);
  }
}

}  // namespace sc::model
