#include "model/offload_plan.h"

namespace sc::model {

OffloadPlan plan_offload(const std::vector<std::vector<HdoTensor>>& groups,
                         const HdoConfig& config) {
  OffloadPlan plan;
  int64_t total = 0;
  for (const auto& g : groups) {
    for (const auto& t : g) total += t.numel;
  }
  const double threshold = static_cast<double>(total) * config.offload_fraction;
  int64_t offloaded = 0;
  int host_tensors = 0;
  bool any_host_group = false;
  for (const auto& g : groups) {
    std::vector<HdoPlacement> out;
    for (const auto& t : g) {
      HdoPlacement p;
      if (static_cast<double>(offloaded) < threshold) {
        p.offloaded = true;
        offloaded += t.numel;
      }
      p.fp32_copy = config.param_update_in_fp32 && t.dtype != DType::kFloat32;
      // The host copy is pinned, and so is an fp32 clone that replaces it (pin_cpu_params):
      // every host tensor of a non-blocking copy is pinned. Upstream at d8b71082 left the clone
      // pageable (HDO-02, fixed by Megatron PR #4547).
      p.host_pinned = p.offloaded && config.accelerator_is_cuda;
      if (p.offloaded) {
        p.cpu_optimizer = config.overlap_cpu_optimizer_d2h_h2d ? host_tensors : 0;
        ++host_tensors;
        any_host_group = true;
      } else {
        plan.has_accelerator_optimizer = true;
      }
      out.push_back(p);
    }
    plan.placements.push_back(std::move(out));
  }
  plan.num_cpu_optimizers =
      config.overlap_cpu_optimizer_d2h_h2d ? host_tensors : (any_host_group ? 1 : 0);
  return plan;
}

}  // namespace sc::model
