#include "model/memory.h"

namespace sc::model {

SideBytes& SideBytes::operator+=(const SideBytes& other) {
  param_buffer += other.param_buffer;
  grad_buffer += other.grad_buffer;
  main_params += other.main_params;
  grad_copies += other.grad_copies;
  optimizer_state += other.optimizer_state;
  return *this;
}

RankBytes& RankBytes::operator+=(const RankBytes& other) {
  accelerator += other.accelerator;
  host += other.host;
  host_pinned += other.host_pinned;
  return *this;
}

namespace {

// exp_avg and exp_avg_sq, fp32.
constexpr int64_t kMomentBytes = 8;

// True when the main grad of `e`'s parameter (a view of its grad buffer) is fp32, so that
// `.float()` of it is the view itself and no copy is made.
bool fp32_main_grad(const CaseSpec& c, const ShardEntry& e) {
  return c.grad_reduce_in_fp32 || c.params[e.param].dtype == DType::kFloat32;
}

// Bytes per element of TE FusedAdam's `master_param` state for `e` (precision-aware, no offload).
int64_t master_state_bytes(const CaseSpec& c, const ShardEntry& e) {
  return e.dtype == DType::kBFloat16 && c.store_param_remainders ? 2 : 4;
}

// The hybrid optimizer's share: host copies, fp32 copies, their grads and the state, each on the
// side its sub-optimizer steps.
void add_hybrid(const CaseSpec& c, const RankPlan& plan,
                const std::vector<std::vector<HdoTensor>>& tensors, bool cuda, RankBytes& b) {
  const OffloadPlan off = plan_offload(
      tensors,
      HdoConfig{c.offload_fraction, true, c.overlap_cpu_optimizer_d2h_h2d, cuda, std::nullopt});
  for (size_t g = 0; g < tensors.size(); ++g) {
    for (size_t i = 0; i < tensors[g].size(); ++i) {
      const HdoPlacement& p = off.placements[g][i];
      const int64_t n = tensors[g][i].numel;
      const int64_t copy = n * (p.fp32_copy ? 4 : element_size(tensors[g][i].dtype));
      if (p.offloaded) {
        b.host.main_params += copy;
        b.host.grad_copies += copy;  // the host grad the D2H copy fills
        b.host.optimizer_state += n * kMomentBytes;
        if (p.host_pinned) b.host_pinned += copy;
        if (cuda) b.host_pinned += copy;  // host grads are pinned (pin_cpu_grads)
        continue;
      }
      if (p.fp32_copy) {
        b.accelerator.main_params += copy;
        // `.grad = grad.to(fp32)`: a copy unless the (decoupled) grad is fp32 already.
        if (!fp32_main_grad(c, plan.groups[g].installed[i])) b.accelerator.grad_copies += copy;
      }
      b.accelerator.optimizer_state += n * kMomentBytes;
    }
  }
}

}  // namespace

RankBytes rank_bytes(const CaseSpec& spec, const std::vector<BufferLayout>& layouts,
                     const RankPlan& plan, bool accelerator_is_cuda) {
  RankBytes b;
  const bool expert = plan.instance == Instance::kExpert;
  for (const BufferLayout& l : layouts) {
    if (l.key.is_expert != expert) continue;
    b.accelerator.param_buffer += l.numel() * element_size(l.key.param_dtype);
    b.accelerator.grad_buffer += l.numel() * element_size(l.key.grad_dtype);
  }
  std::vector<std::vector<HdoTensor>> tensors;
  for (const GroupPlan& g : plan.groups) {
    std::vector<HdoTensor> ts;
    for (const ShardEntry& e : g.installed) {
      const int64_t n = e.param_range.size();
      if (!e.aliases_model) b.accelerator.main_params += n * element_size(e.dtype);
      // Not precision-aware: `main_param.grad = main_grad.float()`, a copy of a 16-bit grad.
      if (e.kind == ShardKind::kFp32MainCopy && !fp32_main_grad(spec, e)) {
        b.accelerator.grad_copies += n * 4;
      }
      if (!spec.cpu_offload) {
        b.accelerator.optimizer_state += n * kMomentBytes;
        if (spec.precision_aware) b.accelerator.optimizer_state += n * master_state_bytes(spec, e);
      }
      ts.push_back(HdoTensor{n, e.dtype});
    }
    tensors.push_back(std::move(ts));
  }
  if (spec.cpu_offload) add_hybrid(spec, plan, tensors, accelerator_is_cuda, b);
  return b;
}

}  // namespace sc::model
