// Every re-injected known bug (mutant) and the unfixed pr6982 (finding F1) is killed by at
// least one named property: run with a fixed RapidCheck seed, the property fails. The fully
// patched variant passes the same runs.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include "properties/property_table.h"

namespace sc::props {
namespace {

bool fails(const std::string& property, const sut::Behaviour& b, uint64_t seed) {
  rc::detail::TestParams params;
  params.seed = seed;
  params.maxSuccess = 200;
  const auto& body = diff_property(property).body;
  const rc::detail::TestResult r =
      rc::detail::checkTestable([&] { body(b); }, rc::detail::TestMetadata{}, params);
  rc::detail::FailureResult failure;
  return r.match(failure);
}

struct Kill {
  const char* variant;
  const char* property;
};

void PrintTo(const Kill& k, std::ostream* os) { *os << k.variant << " by " << k.property; }

class MutantKill : public ::testing::TestWithParam<Kill> {};

TEST_P(MutantKill, IsKilledByItsProperty) {
  const Kill k = GetParam();
  const auto b = sut::behaviour_by_name(k.variant);
  ASSERT_TRUE(b) << k.variant;
  EXPECT_TRUE(fails(k.property, *b, 1)) << k.variant << " survives " << k.property;
  EXPECT_FALSE(fails(k.property, sut::fully_patched(), 1))
      << "the fully patched variant fails " << k.property;
}

INSTANTIATE_TEST_SUITE_P(
    Known, MutantKill,
    ::testing::Values(
        Kill{"MEG-01", "ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing"},
        Kill{"MEG-01", "ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank"},
        Kill{"MEG-02", "ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing"},
        Kill{"MEG-03", "ShardBuilderDiff.PortRangesEqualModelOnEveryRank"},
        Kill{"DS-01", "HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep"},
        Kill{"DS-01", "HybridOptimizerDiff.ZeroLrAndWeightDecayLeaveParamsUnchanged"},
        Kill{"DS-03", "HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep"},
        Kill{"DS-04", "HybridOptimizerDiff.OptimizerStateEqualsTheReference"},
        Kill{"DS-06", "HybridOptimizerDiff.HdoAtFractionOneEqualsThePlainOptimizer"},
        Kill{"pr6982", "HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep"},
        Kill{"pr6982", "HybridOptimizerDiff.OffloadFractionDoesNotChangeTheResult"},
        Kill{"hdo-accel-grad", "HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption"},
        Kill{"HDO-05", "HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption"},
        Kill{"HDO-07", "HybridOptimizerDiff.OptimizerStateEqualsTheReference"},
        Kill{"HDO-07", "HybridOptimizerDiff.PlacementEqualsTheOffloadPlan"},
        Kill{"HDO-08", "HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep"},
        Kill{"PT-01", "FusedAdamDiff.EveryTensorFollowsTheFusedOrderEmptyOnesIncluded"},
        Kill{"PT-03", "HybridOptimizerDiff.LoadedStateLivesOnItsSubOptimizersDevice"},
        Kill{"RULE-pa-no-master-weights",
             "HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep"},
        Kill{"hdo-fused-step", "HybridOptimizerState.CommandSequencesMatchTheReference"},
        Kill{"hdo-load-alias", "DistributedCheckpoint.ResumeEqualsNoInterruption"},
        Kill{"distopt-load-step", "StreamSimulation.NoRaceBetweenStreams"},
        Kill{"distopt-load-step", "StreamSimulation.EveryScheduleGivesTheReferenceParams"},
        Kill{"HDO-01", "StreamSimulation.NoRaceBetweenStreams"},
        Kill{"HDO-01", "StreamSimulation.EveryScheduleGivesTheReferenceParams"},
        Kill{"STREAM-no-d2h-wait", "StreamSimulation.NoRaceBetweenStreams"},
        Kill{"HDO-02", "StreamSimulation.NonBlockingCopiesUsePinnedMemory"},
        Kill{"hdo-grad-stream", "StreamSimulation.NonBlockingCopiesUsePinnedMemory"},
        Kill{"PT-04", "DistributedCheckpoint.ResumeEqualsNoInterruption"},
        Kill{"DS-05", "HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep"},
        Kill{"hdo-pin-fp32", "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState"},
        Kill{"distopt-reshard-padding",
             "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState"},
        Kill{"distopt-dp-zero-sync",
             "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState"},
        Kill{"MEG-04", "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState"},
        Kill{"DS-07", "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState"},
        Kill{"MEG-06", "DistributedCheckpoint.ResumeEqualsNoInterruption"},
        Kill{"MEG-07", "DistributedCheckpoint.ResumeEqualsNoInterruption"},
        Kill{"PIPE-no-staging-wait", "StreamSimulation.NoRaceBetweenStreams"},
        Kill{"PIPE-no-chunk-wait", "StreamSimulation.NoRaceBetweenStreams"},
        Kill{"PIPE-no-chunk-wait", "StreamSimulation.EveryScheduleGivesTheReferenceParams"}),
    [](const ::testing::TestParamInfo<Kill>& info) {
      std::string n = std::string(info.param.variant) + "_" + info.param.property;
      for (char& ch : n) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return n;
    });

}  // namespace
}  // namespace sc::props
