// The claims of the shard-builder properties as plain functions: each returns the first
// violation as a message, or nothing. Properties RC_ASSERT that they return nothing; tests feed
// them known-bad layouts and variants to show that each can fail.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/layout.h"
#include "model/offload_plan.h"
#include "model/shard.h"
#include "model/spec.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

using Violation = std::optional<std::string>;

// Per bucket the rank world ranges tile the padded bucket, and every element of every parameter
// is owned by exactly one rank (over all ranks of the buffer's DP group).
Violation check_ownership(const model::CaseSpec& spec, const std::vector<model::BufferLayout>& ls);
// 64-element parameter starts, reverse order, bucket ends divisible by lcm(dp,128) (or the busbw
// divisor), contiguous buckets, a shared embedding alone in its bucket, the bucket-size rule.
Violation check_layout_rules(const model::CaseSpec& spec,
                             const std::vector<model::BufferLayout>& ls);
// The port's ranges equal the model's on this rank.
Violation check_ranges(const model::RankPlan& plan, const rig::RankObservation& obs);
// Every installed tensor is a leaf with the plan's param, size, dtype, aliasing, offset and main
// param; the index map is the plan's; the final optimizer holds exactly these tensors.
Violation check_installed(const model::CaseSpec& spec, const model::RankPlan& plan,
                          const rig::RankObservation& obs);
// Construction succeeded.
Violation check_constructed(const rig::RankObservation& obs);
// The ranks whose construction failed are exactly `predicted` (both sorted ascending), and each
// failure is the leaf check's.
Violation check_failing_ranks(const std::vector<int64_t>& predicted,
                              const std::vector<rig::RankObservation>& observed);
// The offload plans at fractions lo <= hi: each offloads a prefix (in group, position order)
// that is the shortest one whose numel reaches fraction * total; the prefix at lo is no longer
// than at hi; fraction 0 offloads nothing and 1 everything.
// `planner` is model::plan_offload unless a test hands in a known-bad one.
using Planner = model::OffloadPlan (*)(const std::vector<std::vector<model::HdoTensor>>&,
                                       const model::HdoConfig&);
Violation check_offload_laws(const std::vector<std::vector<model::HdoTensor>>& groups, double lo,
                             double hi, Planner planner = &model::plan_offload);
// The ranks of an instance that a diff property runs the port on: all when dp <= 8, else eight
// chosen to include the first, the last and both owners and non-owners of fp32 pieces.
std::vector<int64_t> ranks_to_check(const model::CaseSpec& spec,
                                    const std::vector<model::BufferLayout>& ls,
                                    model::Instance instance);

}  // namespace sc::props
