#include "model/offload_plan.h"

namespace sc::model {

namespace {

// Numbers the host sub-optimizers with overlap: one per host tensor, or S1's chunks of a group
// closed once they hold host_min_numel elements (and at the group's end).
class HostOptimizers {
 public:
  explicit HostOptimizers(std::optional<int64_t> min_numel) : min_numel_(min_numel) {}
  int take(int64_t numel) {
    if (!open_) {
      current_ = count_++;
      numel_ = 0;
      open_ = true;
    }
    numel_ += numel;
    if (!min_numel_ || numel_ >= *min_numel_) open_ = false;
    return current_;
  }
  void end_group() { open_ = false; }
  int count() const { return count_; }

 private:
  std::optional<int64_t> min_numel_;
  int count_ = 0, current_ = -1;
  int64_t numel_ = 0;
  bool open_ = false;
};

}  // namespace

OffloadPlan plan_offload(const std::vector<std::vector<HdoTensor>>& groups,
                         const HdoConfig& config) {
  OffloadPlan plan;
  int64_t total = 0;
  for (const auto& g : groups) {
    for (const auto& t : g) total += t.numel;
  }
  const double threshold = static_cast<double>(total) * config.offload_fraction;
  int64_t offloaded = 0;
  HostOptimizers host(config.host_min_numel);
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
        p.cpu_optimizer = config.overlap_cpu_optimizer_d2h_h2d ? host.take(t.numel) : 0;
        any_host_group = true;
      } else {
        plan.has_accelerator_optimizer = true;
      }
      out.push_back(p);
    }
    plan.placements.push_back(std::move(out));
    host.end_group();
  }
  plan.num_cpu_optimizers =
      config.overlap_cpu_optimizer_d2h_h2d ? host.count() : (any_host_group ? 1 : 0);
  return plan;
}

}  // namespace sc::model
