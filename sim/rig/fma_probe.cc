#include "sim/rig/fma_probe.h"

#include "sim/rig/rng.h"
#include "sim/port/torch_pch.h"

namespace sc::sim {

std::optional<model::FmaMode> torch_cpu_fma_mode() {
  static const std::optional<model::FmaMode> kMode = []() -> std::optional<model::FmaMode> {
    constexpr int64_t n = 1037;  // not a multiple of any vector width: body and tail
    SplitMix64 rng(0x5eed);
    std::vector<float> p0(n);
    for (float& x : p0) x = rng.symmetric_unit();
    std::vector<std::vector<float>> grads(3, std::vector<float>(n));
    for (auto& g : grads) {
      for (float& x : g) x = rng.symmetric_unit() * 0.1f;
    }
    const model::AdamWHyper h{1e-2, 0.9, 0.999, 1e-8, 0.1};
    torch::Tensor p = torch::tensor(p0).requires_grad_(true);
    torch::optim::AdamW opt(std::vector<torch::Tensor>{p},
                            torch::optim::AdamWOptions(h.lr)
                                .betas({h.beta1, h.beta2})
                                .eps(h.eps)
                                .weight_decay(h.weight_decay));
    for (const auto& g : grads) {
      p.mutable_grad() = torch::tensor(g);
      opt.step();
    }
    const float* got = p.data_ptr<float>();
    for (model::FmaMode mode : {model::FmaMode::kFused, model::FmaMode::kSeparate}) {
      std::vector<float> q = p0;
      model::AdamWState32 s;
      for (const auto& g : grads) model::adamw_step_torch(q, g, s, h, mode);
      if (std::equal(q.begin(), q.end(), got)) return mode;
    }
    return std::nullopt;
  }();
  return kMode;
}

}  // namespace sc::sim
