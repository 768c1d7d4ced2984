// Bytes one rank holds after the distributed optimizer is built (before the first step, so no
// optimizer state): on the accelerator the param and grad buffers, the fp32 main params of
// 16-bit pieces (not precision-aware) and the hybrid optimizer's fp32 copies that stay there;
// on the host the hybrid optimizer's copies of offloaded pieces.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layout.h"
#include "model/offload_plan.h"
#include "model/shard.h"
#include "model/spec.h"

namespace sc::model {

// Bytes on each side.
struct RankBytes {
  int64_t accelerator = 0;
  int64_t host = 0;
};

// The bytes of `plan`'s rank: `layouts` = full_param_layout(c); the offload plan is computed
// from the plan when c.cpu_offload.
RankBytes rank_bytes(const CaseSpec& c, const std::vector<BufferLayout>& layouts,
                     const RankPlan& plan);

}  // namespace sc::model
