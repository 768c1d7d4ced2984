#include "model/adamw.h"

#include <cassert>
#include <cmath>

namespace sc::model {

void adamw_step_torch(std::vector<float>& p, const std::vector<float>& g, AdamWState32& state,
                      const AdamWHyper& h, FmaMode fma) {
  assert(p.size() == g.size());
  if (state.exp_avg.size() != p.size()) {
    state.exp_avg.assign(p.size(), 0.0f);
    state.exp_avg_sq.assign(p.size(), 0.0f);
  }
  state.step += 1;
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(state.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(state.step));
  // Scalars reach the fp32 kernels as fp32.
  const float decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  const float b1 = static_cast<float>(h.beta1), a1 = static_cast<float>(1.0 - h.beta1);
  const float b2 = static_cast<float>(h.beta2), a2 = static_cast<float>(1.0 - h.beta2);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(h.eps);
  const float step_size = static_cast<float>(-(h.lr / bc1));
  const bool fused = fma == FmaMode::kFused;
  for (size_t i = 0; i < p.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    if (h.weight_decay != 0.0) p[i] = p[i] * decay;
    m = m * b1;
    m = fused ? std::fma(a1, g[i], m) : m + a1 * g[i];
    v = v * b2;
    const float ag = a2 * g[i];
    v = fused ? std::fma(ag, g[i], v) : v + ag * g[i];
    const float denom = std::sqrt(v) / sqrt_bc2 + eps;
    const float scaled = step_size * m;
    p[i] = p[i] + scaled / denom;
  }
}

void adamw_step_fused(std::vector<float>& p, const std::vector<float>& g, AdamWState32& state,
                      const AdamWHyper& h, int64_t group_step) {
  assert(p.size() == g.size());
  if (state.exp_avg.size() != p.size()) {
    state.exp_avg.assign(p.size(), 0.0f);
    state.exp_avg_sq.assign(p.size(), 0.0f);
  }
  state.step = group_step;
  const float bc1 = static_cast<float>(1.0 - std::pow(h.beta1, static_cast<double>(group_step)));
  const float bc2 = static_cast<float>(1.0 - std::pow(h.beta2, static_cast<double>(group_step)));
  const float b1 = static_cast<float>(h.beta1), b2 = static_cast<float>(h.beta2);
  const float eps = static_cast<float>(h.eps), lr = static_cast<float>(h.lr);
  const float wd = static_cast<float>(h.weight_decay);
  for (size_t i = 0; i < p.size(); ++i) {
    float& m = state.exp_avg[i];
    float& v = state.exp_avg_sq[i];
    const float gi = g[i];
    // Separate roundings (the build compiles with -ffp-contract=off; so do the port's kernels).
    m = b1 * m + (1.0f - b1) * gi;
    v = b2 * v + (1.0f - b2) * gi * gi;
    const float m_hat = m / bc1;
    const float v_hat = v / bc2;
    const float denom = std::sqrt(v_hat) + eps;
    const float ratio = m_hat / denom;
    const float update = ratio + wd * p[i];
    const float delta = lr * update;
    p[i] = p[i] - delta;
  }
}

void adamw_step_fp64(std::vector<double>& p, const std::vector<double>& g, AdamWState64& state,
                     const AdamWHyper& h) {
  if (state.exp_avg.size() != p.size()) {
    state.exp_avg.assign(p.size(), 0.0);
    state.exp_avg_sq.assign(p.size(), 0.0);
  }
  state.step += 1;
  const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(state.step));
  const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(state.step));
  for (size_t i = 0; i < p.size(); ++i) {
    double& m = state.exp_avg[i];
    double& v = state.exp_avg_sq[i];
    p[i] *= 1.0 - h.lr * h.weight_decay;
    m = h.beta1 * m + (1.0 - h.beta1) * g[i];
    v = h.beta2 * v + (1.0 - h.beta2) * g[i] * g[i];
    p[i] -= (h.lr / bc1) * m / (std::sqrt(v) / std::sqrt(bc2) + h.eps);
  }
}

}  // namespace sc::model
