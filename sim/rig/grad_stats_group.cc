#include "sim/rig/grad_stats_group.h"

#include <cmath>

#include "model/layout.h"
#include "sim/port/clip_grads.h"
#include "sim/rig/dtypes.h"

namespace sc::rig {

GradStatsGroupSim::GradStatsGroupSim(const model::CaseSpec& spec, model::Instance instance,
                                     int64_t rank, double clip_grad, torch::Device device)
    : spec_(spec), rank_(rank), clip_grad_(clip_grad), device_(device) {
  const auto layouts = model::full_param_layout(spec_);
  for (int64_t r = 0; r < model::instance_dp(spec_, instance); ++r) {
    plans_.push_back(model::plan_rank(spec_, layouts, instance, r));
  }
}

void GradStatsGroupSim::begin_step(const std::vector<std::vector<float>>& grads,
                                   float inv_scale) {
  grads_ = grads;
  inv_scale_ = inv_scale;
  total_norm_.reset();
  others_.assign(plans_.size(), {});
}

std::vector<torch::Tensor> GradStatsGroupSim::main_grads_of(int64_t rank) const {
  const bool pa = spec_.precision_aware;
  std::vector<torch::Tensor> out;
  for (const auto& group : plans_[static_cast<size_t>(rank)].groups) {
    for (const auto& e : group.installed) {
      const model::ParamSpec& p = spec_.params[static_cast<size_t>(e.param)];
      const auto& full = grads_.at(static_cast<size_t>(e.param));
      const auto buffer = to_torch_dtype(spec_.grad_reduce_in_fp32 ? model::DType::kFloat32
                                                                   : p.dtype);
      // The shard of the grad buffer, then `.float()` unless precision-aware.
      torch::Tensor g = torch::tensor(std::vector<float>(full.begin() + e.param_range.start,
                                                         full.begin() + e.param_range.end))
                            .to(device_, buffer);
      if (!pa) g = g.to(torch::kFloat);
      if (inv_scale_ != 1.0f) g.copy_(g.to(torch::kFloat).mul(inv_scale_));
      out.push_back(g);
    }
  }
  return out;
}

void GradStatsGroupSim::all_reduce_sum(torch::Tensor& tensor) {
  const bool norm = tensor.scalar_type() == torch::kFloat;
  torch::Tensor total = torch::zeros_like(tensor).cpu();
  for (int64_t r = 0; r < static_cast<int64_t>(plans_.size()); ++r) {
    if (r == rank_) {
      total += tensor.cpu();
      continue;
    }
    std::vector<torch::Tensor>& grads = others_[static_cast<size_t>(r)];
    if (grads.empty()) grads = main_grads_of(r);
    if (norm) {
      total += sut::local_grad_norm_squared(grads).cpu();
    } else {
      // The zeros are counted after the clipping, by the coefficient every rank computes alike.
      if (total_norm_ && clip_grad_ > 0.0) {
        sut::clip_grad_by_total_norm_fp32(grads, clip_grad_, *total_norm_);
      }
      total += sut::local_zero_count(grads).cpu();
    }
  }
  tensor.copy_(total);
  if (norm) total_norm_ = std::pow(total.item<double>(), 1.0 / 2.0);
}

}  // namespace sc::rig
