#include "properties/diff_props.h"

#include <rapidcheck.h>

#include "model/layout.h"
#include "model/shard.h"
#include "properties/checks.h"
#include "properties/coverage.h"
#include "properties/support.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

void run_diff_property(const model::CaseSpec& spec, const sut::Behaviour& behaviour,
                       DiffClaim claim) {
  const auto layouts = model::full_param_layout(spec);
  tag_coverage(spec);
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    std::vector<rig::RankObservation> observed;
    for (int64_t r : ranks_to_check(spec, layouts, inst)) {
      const model::RankPlan plan = model::plan_rank(spec, layouts, inst, r);
      rig::RankObservation obs =
          rig::build_rank(target_for(behaviour), spec, inst, r, /*seed=*/r)->construction();
      Violation v;
      switch (claim) {
        case DiffClaim::kRanges:
          v = check_ranges(plan, obs);
          break;
        case DiffClaim::kInstalled:
          v = check_installed(spec, plan, obs);
          break;
        case DiffClaim::kConstructs:
          v = check_constructed(obs);
          break;
        case DiffClaim::kUpstreamFailingRanks:
          break;
      }
      if (v) RC_LOG() << under_test(behaviour) << ": " << *v << "\n";
      RC_ASSERT(!v);
      observed.push_back(std::move(obs));
    }
    if (claim == DiffClaim::kUpstreamFailingRanks) {
      const Violation v =
          check_failing_ranks(model::upstream_failing_ranks(spec, layouts, inst), observed);
      if (v) RC_LOG() << under_test(behaviour) << ": " << *v << "\n";
      RC_ASSERT(!v);
    }
  }
}

}  // namespace sc::props
