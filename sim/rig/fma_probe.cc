#include "sim/rig/fma_probe.h"

#include <cstring>

#include "sim/rig/rng.h"
#include "sim/port/torch_adamw.h"
#include "sim/port/torch_pch.h"

namespace sc::rig {

namespace {

constexpr int64_t kProbeSize = 1037;  // not a multiple of any vector width: body and tail

struct Probe {
  std::vector<float> p0;
  std::vector<std::vector<float>> grads;
  model::AdamWHyper h{1e-2, 0.9, 0.999, 1e-8, 0.1};
};

const Probe& probe() {
  static const Probe kProbe = [] {
    Probe pr;
    SplitMix64 rng(0x5eed);
    pr.p0.resize(kProbeSize);
    for (float& x : pr.p0) x = rng.symmetric_unit();
    pr.grads.assign(3, std::vector<float>(kProbeSize));
    for (auto& g : pr.grads) {
      for (float& x : g) x = rng.symmetric_unit() * 0.1f;
    }
    return pr;
  }();
  return kProbe;
}

// The probe's parameter after three steps of sut::TorchAdamW with `fused`.
std::vector<float> torch_adamw_probe(bool fused) {
  const Probe& pr = probe();
  torch::Tensor p = torch::tensor(pr.p0).requires_grad_(true);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(pr.h.lr)
                              .betas({pr.h.beta1, pr.h.beta2})
                              .eps(pr.h.eps)
                              .weight_decay(pr.h.weight_decay)));
  sut::TorchAdamW opt(std::move(groups), fused, sut::Behaviour{});
  for (const auto& g : pr.grads) {
    p.mutable_grad() = torch::tensor(g);
    opt.step();
  }
  const float* got = p.data_ptr<float>();
  return std::vector<float>(got, got + kProbeSize);
}

template <typename StepFn>
bool reproduces(const std::vector<float>& got, StepFn step) {
  std::vector<float> q = probe().p0;
  model::AdamWState32 s;
  for (const auto& g : probe().grads) step(q, g, s);
  return q == got;
}

}  // namespace

void torch_tensor_sqrt(std::vector<float>& values) {
  torch::NoGradGuard no_grad;
  const torch::Tensor t =
      torch::from_blob(values.data(), {static_cast<int64_t>(values.size())}, torch::kFloat);
  const torch::Tensor root = t.sqrt();
  std::memcpy(values.data(), root.data_ptr<float>(), values.size() * sizeof(float));
}

std::optional<model::TorchCpuKernels> torch_cpu_kernels() {
  static const std::optional<model::TorchCpuKernels> kKernels =
      []() -> std::optional<model::TorchCpuKernels> {
    const model::AdamWHyper& h = probe().h;
    model::TorchCpuKernels k;
    k.tensor_sqrt = &torch_tensor_sqrt;
    const std::vector<float> single = torch_adamw_probe(false);
    bool found = false;
    for (model::FmaMode mode : {model::FmaMode::kFused, model::FmaMode::kSeparate}) {
      found = reproduces(single, [&](auto& q, const auto& g, auto& s) {
        k.fma = mode;
        model::adamw_step_torch_single(q, g, s, h, k);
      });
      if (found) break;
    }
    if (!found) return std::nullopt;
    const std::vector<float> fused = torch_adamw_probe(true);
    for (int width : {8, 16, 4, 32, 1}) {  // AVX2, AVX512, SSE/NEON-class, wider, scalar
      if (reproduces(fused, [&](auto& q, const auto& g, auto& s) {
            model::adamw_step_torch_fused_cpu(q, g, s, h, width);
          })) {
        k.fused_width = width;
        return k;
      }
    }
    return std::nullopt;
  }();
  return kKernels;
}

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
      for (const auto& g : grads) model::adamw_step_torch(q, g, s, h, mode, &torch_tensor_sqrt);
      if (std::equal(q.begin(), q.end(), got)) return mode;
    }
    return std::nullopt;
  }();
  return kMode;
}

}  // namespace sc::rig
