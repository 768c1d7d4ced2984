#include "properties/property_table.h"

#include <cstdlib>
#include <iostream>

#include <rapidcheck.h>

#include "properties/diff_props.h"
#include "properties/fused_adam_props.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"
#include "properties/gen/step_gen.h"
#include "properties/numeric_props.h"

namespace sc::props {

namespace {
constexpr int kMaxSteps = 8;
}  // namespace

const std::vector<PropertyDef>& diff_properties() {
  static const std::vector<PropertyDef> kTable = {
      {"ShardBuilderDiff.PortRangesEqualModelOnEveryRank",
       [](const sut::Behaviour& b) { run_diff_property(*gen::case_spec(), b, DiffClaim::kRanges); }},
      {"ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing",
       [](const sut::Behaviour& b) {
         run_diff_property(*gen::case_spec(), b, DiffClaim::kInstalled);
       }},
      {"ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank",
       [](const sut::Behaviour& b) {
         run_diff_property(*gen::case_spec(), b, DiffClaim::kConstructs);
       }},
      {"HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep",
       [](const sut::Behaviour& b) {
         const model::CaseSpec c = *gen::case_spec();
         run_numeric_property(c, *gen::schedule(c, kMaxSteps), b, NumericClaim::kModelParams);
       }},
      {"HybridOptimizerDiff.OptimizerStateEqualsTheReference",
       [](const sut::Behaviour& b) {
         const model::CaseSpec c = *gen::case_spec();
         run_numeric_property(c, *gen::schedule(c, kMaxSteps), b, NumericClaim::kState);
       }},
      {"HybridOptimizerDiff.PlacementEqualsTheOffloadPlan",
       [](const sut::Behaviour& b) {
         model::CaseSpec c = *gen::case_spec();
         c.cpu_offload = true;
         run_numeric_property(c, gen::Schedule{}, b, NumericClaim::kPlacement);
       }},
      {"HybridOptimizerDiff.ZeroLrAndWeightDecayLeaveParamsUnchanged",
       [](const sut::Behaviour& b) {
         const model::CaseSpec c = *gen::case_spec();
         run_numeric_property(c, *gen::zero_lr_schedule(c, kMaxSteps), b,
                              NumericClaim::kUnchanged);
       }},
      {"HybridOptimizerDiff.OffloadFractionDoesNotChangeTheResult",
       [](const sut::Behaviour& b) {
         model::CaseSpec c = *gen::case_spec();
         c.cpu_offload = true;
         const double other =
             *gen::weighted_choice<double>({{1, 0.0}, {1, 1.0}, {1, 0.5}, {1, 0.1}});
         run_offload_invariance(c, *gen::schedule(c, kMaxSteps), b, other);
       }},
      {"HybridOptimizerDiff.HdoAtFractionOneEqualsThePlainOptimizer",
       [](const sut::Behaviour& b) {
         const model::CaseSpec c = *gen::case_spec();
         run_hdo_against_plain(c, *gen::schedule(c, kMaxSteps), b);
       }},
      {"HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption",
       [](const sut::Behaviour& b) {
         model::CaseSpec c = *gen::case_spec();
         c.cpu_offload = true;
         const gen::Schedule s = *gen::schedule(c, kMaxSteps);
         RC_PRE(s.steps.size() >= 2);
         const size_t split = *rc::gen::inRange<size_t>(1, s.steps.size());
         run_save_load_continue(c, s, split, b);
       }},
      {"DistributedCheckpoint.ResumeEqualsNoInterruption",
       [](const sut::Behaviour& b) {
         const model::CaseSpec c = *gen::case_spec();
         const gen::Schedule s = *gen::schedule(c, kMaxSteps);
         RC_PRE(s.steps.size() >= 2);
         const size_t split = *rc::gen::inRange<size_t>(1, s.steps.size());
         run_dist_ckpt_resume(c, s, split, b);
       }},
      {"HybridOptimizerState.CommandSequencesMatchTheReference",
       [](const sut::Behaviour& b) { run_hybrid_optimizer_state_property(b); }},
      {"FusedAdamDiff.EveryTensorFollowsTheFusedOrderEmptyOnesIncluded",
       [](const sut::Behaviour& b) { run_fused_adam_property(b); }},
  };
  return kTable;
}

const PropertyDef& diff_property(const std::string& name) {
  for (const PropertyDef& p : diff_properties()) {
    if (p.name == name) return p;
  }
  std::cerr << "no property named " << name << "\n";
  std::abort();
}

}  // namespace sc::props
