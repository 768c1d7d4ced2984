// The distributed optimizer with the hybrid optimizer inside, stepped against the reference.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "properties/gen/choice.h"
#include "properties/gen/step_gen.h"
#include "properties/numeric_props.h"
#include "properties/support.h"

namespace sc::props {
namespace {

constexpr int kMaxSteps = 8;

RC_GTEST_PROP(HybridOptimizerDiff, ModelParamsEqualTheReferenceAfterEveryStep, ()) {
  const model::CaseSpec c = *gen::numeric_case_spec();
  run_numeric_property(c, *gen::schedule(c, kMaxSteps), variant_under_test(),
                       NumericClaim::kModelParams);
}

RC_GTEST_PROP(HybridOptimizerDiff, OptimizerStateEqualsTheReference, ()) {
  const model::CaseSpec c = *gen::numeric_case_spec();
  run_numeric_property(c, *gen::schedule(c, kMaxSteps), variant_under_test(),
                       NumericClaim::kState);
}

RC_GTEST_PROP(HybridOptimizerDiff, PlacementEqualsTheOffloadPlan, ()) {
  model::CaseSpec c = *gen::numeric_case_spec();
  c.cpu_offload = true;
  run_numeric_property(c, gen::Schedule{}, variant_under_test(), NumericClaim::kPlacement);
}

RC_GTEST_PROP(HybridOptimizerDiff, ZeroLrAndWeightDecayLeaveParamsUnchanged, ()) {
  const model::CaseSpec c = *gen::numeric_case_spec();
  run_numeric_property(c, *gen::zero_lr_schedule(c, kMaxSteps), variant_under_test(),
                       NumericClaim::kUnchanged);
}

RC_GTEST_PROP(HybridOptimizerDiff, OffloadFractionDoesNotChangeTheResult, ()) {
  model::CaseSpec c = *gen::numeric_case_spec();
  c.cpu_offload = true;
  const double other = *gen::weighted_choice<double>({{1, 0.0}, {1, 1.0}, {1, 0.5}, {1, 0.1}});
  run_offload_invariance(c, *gen::schedule(c, kMaxSteps), variant_under_test(), other);
}

RC_GTEST_PROP(HybridOptimizerDiff, HdoAtFractionOneEqualsThePlainOptimizer, ()) {
  const model::CaseSpec c = *gen::numeric_case_spec();
  run_hdo_against_plain(c, *gen::schedule(c, kMaxSteps), variant_under_test());
}

}  // namespace
}  // namespace sc::props
