#include "model/adamw.h"

#include <cassert>
#include <cmath>

namespace sc::model {

void adamw_step_torch(std::vector<float>& param, const std::vector<float>& grad,
                      AdamWState32& state, const AdamWHyper& hyper, FmaMode fma) {
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
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(hyper.eps);
  const float step_size = static_cast<float>(-(hyper.lr / bc1));
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
    const float denom = std::sqrt(v) / sqrt_bc2 + eps;
    const float scaled = step_size * m;
    param[i] = param[i] + scaled / denom;
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
