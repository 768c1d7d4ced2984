// The distributed optimizer with the hybrid optimizer inside, stepped against the reference.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "properties/property_table.h"
#include "properties/support.h"

namespace sc::props {
namespace {

void run(const char* name) { diff_property(name).body(variant_under_test()); }

RC_GTEST_PROP(HybridOptimizerDiff, ModelParamsEqualTheReferenceAfterEveryStep, ()) {
  run("HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep");
}

RC_GTEST_PROP(HybridOptimizerDiff, OptimizerStateEqualsTheReference, ()) {
  run("HybridOptimizerDiff.OptimizerStateEqualsTheReference");
}

RC_GTEST_PROP(HybridOptimizerDiff, PlacementEqualsTheOffloadPlan, ()) {
  run("HybridOptimizerDiff.PlacementEqualsTheOffloadPlan");
}

RC_GTEST_PROP(HybridOptimizerDiff, ZeroLrAndWeightDecayLeaveParamsUnchanged, ()) {
  run("HybridOptimizerDiff.ZeroLrAndWeightDecayLeaveParamsUnchanged");
}

RC_GTEST_PROP(HybridOptimizerDiff, OffloadFractionDoesNotChangeTheResult, ()) {
  run("HybridOptimizerDiff.OffloadFractionDoesNotChangeTheResult");
}

RC_GTEST_PROP(HybridOptimizerDiff, HdoAtFractionOneEqualsThePlainOptimizer, ()) {
  run("HybridOptimizerDiff.HdoAtFractionOneEqualsThePlainOptimizer");
}

RC_GTEST_PROP(HybridOptimizerDiff, SaveLoadContinueEqualsNoInterruption, ()) {
  run("HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption");
}

RC_GTEST_PROP(HybridOptimizerDiff, LoadedStateLivesOnItsSubOptimizersDevice, ()) {
  run("HybridOptimizerDiff.LoadedStateLivesOnItsSubOptimizersDevice");
}

RC_GTEST_PROP(StreamSimulation, NoRaceBetweenStreams, ()) {
  run("StreamSimulation.NoRaceBetweenStreams");
}

RC_GTEST_PROP(StreamSimulation, NonBlockingCopiesUsePinnedMemory, ()) {
  run("StreamSimulation.NonBlockingCopiesUsePinnedMemory");
}

RC_GTEST_PROP(StreamSimulation, EveryScheduleGivesTheReferenceParams, ()) {
  run("StreamSimulation.EveryScheduleGivesTheReferenceParams");
}

RC_GTEST_PROP(DistributedCheckpoint, ResumeEqualsNoInterruption, ()) {
  run("DistributedCheckpoint.ResumeEqualsNoInterruption");
}

RC_GTEST_PROP(DistributedCheckpoint, GatheredFormatsRoundTripTheOptimizerState, ()) {
  run("DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState");
}

}  // namespace
}  // namespace sc::props
