// Regression: finding F1 (FINDINGS.md), found 2026-11-29 by
// HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep with SC_VARIANT=pr6982,
// RC_PARAMS="seed=1"; shrunk case: one 1-element fp32 parameter, dp 1, precision-aware, offload
// fraction 0, one step. Cause: precision-aware DistributedOptimizer sets only `decoupled_grad`;
// the hybrid optimizer's accelerator sub-optimizer reads `.grad` for shards it steps in place.
#include <gtest/gtest.h>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

model::CaseSpec f1_minimal_case() {
  model::CaseSpec c = test::one_param_case("attn_sink", {1}, model::DType::kFloat32);
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 0.0;
  return c;
}

model::StepInputs one_step() {
  model::StepInputs in;
  in.grads = {{0.5f}};
  in.group_hyper = {model::AdamWHyper{1e-3, 0.9, 0.999, 1e-8, 0.0}};
  return in;
}

TEST(F1HdoAcceleratorFp32Shard, Pr6982NeverUpdatesIt) {
  RankRig rig(f1_minimal_case(), model::Instance::kDense, 0, *sut::behaviour_by_name("pr6982"),
              torch::Device(torch::kCPU), 1);
  ASSERT_FALSE(rig.construction().error);
  ASSERT_FALSE(rig.placement(0, 0).offloaded);
  const float before = rig.model_piece(0, 0)[0];
  for (int k = 0; k < 3; ++k) rig.step(one_step());
  EXPECT_EQ(rig.model_piece(0, 0)[0], before);
  const ObservedState s = rig.state(0, 0);
  ASSERT_TRUE(s.present);
  EXPECT_EQ(s.exp_avg[0], 0.0f);  // state initialised, never stepped
  EXPECT_EQ(s.step, 3);           // while the group's step count moves on
}

TEST(F1HdoAcceleratorFp32Shard, TheProposedFixUpdatesIt) {
  RankRig rig(f1_minimal_case(), model::Instance::kDense, 0, *sut::behaviour_by_name("pr6982+F1"),
              torch::Device(torch::kCPU), 1);
  ASSERT_FALSE(rig.construction().error);
  const float before = rig.model_piece(0, 0)[0];
  rig.step(one_step());
  // Adam's first step moves a parameter by lr against the gradient's sign.
  EXPECT_NEAR(rig.model_piece(0, 0)[0], before - 1e-3f, 1e-6f);
}

}  // namespace
}  // namespace sc::rig
