#include "sim/sut/hybrid_optimizer.h"

#include <set>

namespace sc::sut {

namespace {

const void* key(const torch::Tensor& t) { return t.unsafeGetTensorImpl(); }

torch::optim::AdamWOptions adamw_options(const torch::optim::OptimizerOptions& group) {
  const auto& o = static_cast<const HdoOptions&>(group);
  return torch::optim::AdamWOptions(o.lr())
      .betas({o.beta1(), o.beta2()})
      .eps(o.eps())
      .weight_decay(o.weight_decay());
}

}  // namespace

HybridDeviceOptimizer::HybridDeviceOptimizer(
    std::vector<torch::optim::OptimizerParamGroup> param_groups, const HdoOptions& defaults,
    torch::Device accelerator)
    : torch::optim::Optimizer(std::move(param_groups), std::make_unique<HdoOptions>(defaults)),
      accelerator_(accelerator) {
  init_sub_optimizers();
}

const HdoOptions& HybridDeviceOptimizer::hdo_defaults() const {
  return static_cast<const HdoOptions&>(defaults());
}

void HybridDeviceOptimizer::init_sub_optimizers() {
  const HdoOptions& opts = hdo_defaults();
  const bool cuda = accelerator_.is_cuda();
  // `param.is_cuda`: on the accelerator and not one of our host copies.
  std::set<const void*> host_copies;
  auto on_accelerator = [&](const torch::Tensor& t) {
    return t.device().type() == accelerator_.type() && host_copies.count(key(t)) == 0;
  };

  int64_t gpu_total = 0;
  for (const auto& g : param_groups_) {
    for (const auto& p : g.params()) {
      if (on_accelerator(p)) gpu_total += p.numel();
    }
  }
  const double threshold = static_cast<double>(gpu_total) * opts.offload_fraction();
  int64_t offloaded = 0;
  std::vector<torch::optim::OptimizerParamGroup> cpu_groups, gpu_groups;
  for (const auto& g : param_groups_) {
    std::vector<torch::Tensor> gpu_params, cpu_params;
    for (const auto& orig : g.params()) {
      torch::Tensor p = orig;
      bool cpu_copy = false;
      if (static_cast<double>(offloaded) < threshold && on_accelerator(p)) {
        p = p.detach().clone().cpu();
        if (cuda) p = p.pin_memory();
        host_copies.insert(key(p));
        offloaded += p.numel();
        cpu_copy = true;
      }
      if (opts.param_update_in_fp32() && p.scalar_type() != torch::kFloat) {
        const bool host = host_copies.count(key(p)) != 0;
        p = p.detach().clone().to(torch::kFloat);  // not pinned at d8b71082
        if (host) host_copies.insert(key(p));
        param_to_fp32_param_[key(orig)] = p;
      }
      if (cpu_copy) gpu_params_map_cpu_copy_[key(orig)] = p;
      (on_accelerator(p) ? gpu_params : cpu_params).push_back(p);
    }
    if (!gpu_params.empty()) gpu_groups.emplace_back(gpu_params, std::make_unique<torch::optim::AdamWOptions>(adamw_options(g.options())));
    if (!cpu_params.empty()) cpu_groups.emplace_back(cpu_params, std::make_unique<torch::optim::AdamWOptions>(adamw_options(g.options())));
  }
  for (const auto& g : param_groups_) {
    for (const auto& p : g.params()) {
      auto f = param_to_fp32_param_.find(key(p));
      auto c = gpu_params_map_cpu_copy_.find(key(p));
      param_to_inner_param_[key(p)] = f != param_to_fp32_param_.end()   ? f->second
                                      : c != gpu_params_map_cpu_copy_.end() ? c->second
                                                                            : p;
    }
  }
  if (opts.overlap_cpu_optimizer_d2h_h2d()) {
    for (const auto& g : cpu_groups) {
      for (const auto& p : g.params()) {
        std::vector<torch::optim::OptimizerParamGroup> one;
        one.emplace_back(std::vector<torch::Tensor>{p}, g.options().clone());
        cpu_optimizers_.push_back(std::make_unique<torch::optim::AdamW>(std::move(one)));
      }
    }
  } else if (!cpu_groups.empty()) {
    cpu_optimizers_.push_back(std::make_unique<torch::optim::AdamW>(std::move(cpu_groups)));
  }
  if (!gpu_groups.empty()) {
    gpu_optimizer_ = std::make_unique<torch::optim::AdamW>(std::move(gpu_groups));
  }
}

torch::Tensor HybridDeviceOptimizer::step(LossClosure) {
  TORCH_CHECK(false,
              "HybridDeviceOptimizer::step: the step flow is not ported yet; this build checks "
              "construction only");
}

bool HybridDeviceOptimizer::is_offloaded(const torch::Tensor& original) const {
  return gpu_params_map_cpu_copy_.count(key(original)) != 0;
}

torch::Tensor HybridDeviceOptimizer::inner_param(const torch::Tensor& original) const {
  auto it = param_to_inner_param_.find(key(original));
  TORCH_CHECK(it != param_to_inner_param_.end(), "not a parameter of this optimizer");
  return it->second;
}

}  // namespace sc::sut
