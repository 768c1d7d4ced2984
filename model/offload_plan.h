// HybridDeviceOptimizer's offload plan (`_get_sub_optimizer_param_groups`,
// `_init_sub_optimizers`): which installed tensors get a host copy, which get an fp32 copy, where
// each tensor the sub-optimizers step lives, which host copies are pinned, and how many host
// sub-optimizers there are.
//
// Rule: whole tensors, a greedy prefix in (group, position) order; a tensor is offloaded while
// the running count is still below fraction * (total accelerator numel) — tested before adding,
// so the last one may overshoot. Fraction 0 offloads nothing, 1 everything.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/dtype.h"

namespace sc::model {

// One tensor handed to the hybrid optimizer.
struct HdoTensor {
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
};

// The HybridDeviceOptimizer arguments the plan depends on.
struct HdoConfig {
  double offload_fraction = 1.0;
  bool param_update_in_fp32 = true;
  bool overlap_cpu_optimizer_d2h_h2d = true;
  bool accelerator_is_cuda = false;  // host copies are pinned only with CUDA
  // With overlap: upstream steps one host sub-optimizer per tensor (nothing here); proposal S1
  // (FINDINGS.md, `overlap_cpu_optimizer_min_numel`) lets consecutive host tensors of a group
  // share one until it holds at least this many elements.
  std::optional<int64_t> host_min_numel;
};

// Where one tensor ends up.
struct HdoPlacement {
  bool offloaded = false;   // has a host copy stepped by a host sub-optimizer
  bool fp32_copy = false;   // param_update_in_fp32 and not fp32: an fp32 copy is stepped
  bool host_pinned = false; // the host tensor the sub-optimizer steps is pinned
  int cpu_optimizer = -1;   // index of its host sub-optimizer, -1 on the accelerator
};

// The plan for `groups` (installed order), one placement per tensor in the same shape.
struct OffloadPlan {
  std::vector<std::vector<HdoPlacement>> placements;
  int num_cpu_optimizers = 0;
  bool has_accelerator_optimizer = false;
};

// The plan of a HybridDeviceOptimizer over `groups` with `config`. Host sub-optimizers are
// numbered in (group, position) order.
OffloadPlan plan_offload(const std::vector<std::vector<HdoTensor>>& groups,
                         const HdoConfig& config);

}  // namespace sc::model
