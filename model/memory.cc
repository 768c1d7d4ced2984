#include "model/memory.h"

namespace sc::model {

RankBytes rank_bytes(const CaseSpec& c, const std::vector<BufferLayout>& layouts,
                     const RankPlan& plan) {
  RankBytes b;
  const bool expert = plan.instance == Instance::kExpert;
  for (const BufferLayout& l : layouts) {
    if (l.key.is_expert != expert) continue;
    b.accelerator += l.numel() * (element_size(l.key.param_dtype) + element_size(l.key.grad_dtype));
  }
  std::vector<std::vector<HdoTensor>> tensors;
  for (const GroupPlan& g : plan.groups) {
    std::vector<HdoTensor> ts;
    for (const ShardEntry& e : g.installed) {
      if (!e.aliases_model) b.accelerator += e.param_range.size() * element_size(e.dtype);
      ts.push_back(HdoTensor{e.param_range.size(), e.dtype});
    }
    tensors.push_back(std::move(ts));
  }
  if (!c.cpu_offload) return b;
  const OffloadPlan off = plan_offload(tensors, HdoConfig{c.offload_fraction, true, true, false});
  for (size_t g = 0; g < tensors.size(); ++g) {
    for (size_t i = 0; i < tensors[g].size(); ++i) {
      const HdoPlacement& p = off.placements[g][i];
      const int64_t bytes =
          tensors[g][i].numel * (p.fp32_copy ? 4 : element_size(tensors[g][i].dtype));
      if (p.offloaded) {
        b.host += bytes;
      } else if (p.fp32_copy) {
        b.accelerator += bytes;
      }
    }
  }
  return b;
}

}  // namespace sc::model
