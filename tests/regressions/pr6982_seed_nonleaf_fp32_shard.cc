// Regression: the seed defect, Megatron-LM issue #6212 (fixed upstream by PR #6982).
// Found 2026-11-29 by ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank with
// SC_VARIANT=upstream; shrunk case: one 1-element fp32 parameter, dp 1, offload on.
// Cause: `_build_model_and_main_param_groups` slices fp32 model params without `detach()`, so
// the shard is an autograd view (non-leaf); the HybridDeviceOptimizer rebuild runs
// add_param_group, whose leaf check rejects it.
#include <gtest/gtest.h>

#include "sim/port/device.h"
#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"
#include "tests/support/devices.h"

namespace sc::rig {
namespace {


model::CaseSpec seed_minimal_case() {
  model::CaseSpec c = test::one_param_case("alpha", {1}, model::DType::kFloat32);
  c.cpu_offload = true;
  c.offload_fraction = 1.0;
  c.precision_aware = true;
  return c;
}

TEST(Pr6982SeedNonLeafFp32Shard, LibTorchRejectsANonDetachedSliceAndAcceptsADetachedOne) {
  torch::Tensor p = torch::zeros({4}).requires_grad_(true);
  torch::Tensor shard = p.view(-1).slice(0, 0, 2);
  EXPECT_TRUE(shard.requires_grad());
  EXPECT_FALSE(shard.is_leaf());
  try {
    torch::optim::AdamW opt(std::vector<torch::Tensor>{shard});
    FAIL() << "AdamW accepted a non-leaf tensor";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(), "can't optimize a non-leaf Tensor");
  }
  torch::Tensor fixed = p.detach().view(-1).slice(0, 0, 2);
  EXPECT_NO_THROW(torch::optim::AdamW(std::vector<torch::Tensor>{fixed}));
  EXPECT_TRUE(fixed.is_alias_of(p));
}

TEST(Pr6982SeedNonLeafFp32Shard, UpstreamFailsWithTheExactMessage) {
  const RankObservation obs =
      run_rank(seed_minimal_case(), model::Instance::kDense, 0, sut::upstream(), kCpu, 1);
  ASSERT_TRUE(obs.error);
  EXPECT_EQ(obs.error_type, "ValueError");
  EXPECT_EQ(*obs.error, "can't optimize a non-leaf Tensor");
  EXPECT_EQ(obs.failing_param, 0);
}

TEST(Pr6982SeedNonLeafFp32Shard, UpstreamWithoutTheRebuildConstructsButHandsOverANonLeaf) {
  model::CaseSpec c = seed_minimal_case();
  c.cpu_offload = false;  // plain AdamW: groups are assigned, never validated
  const RankObservation obs = run_rank(c, model::Instance::kDense, 0, sut::upstream(), kCpu, 1);
  EXPECT_FALSE(obs.error);
  ASSERT_EQ(obs.groups.at(0).size(), 1u);
  EXPECT_FALSE(obs.groups[0][0].is_leaf);
  EXPECT_TRUE(obs.groups[0][0].has_grad_fn);
}

TEST(Pr6982SeedNonLeafFp32Shard, Pr6982ConstructsAndTheShardStillAliasesAtTheRightOffset) {
  model::CaseSpec c = seed_minimal_case();
  c.params[0].shape = {200};
  c.dp = 2;  // bucket [0, 256): rank 1 owns elements [128, 200) of the parameter
  for (int64_t r : {0, 1}) {
    const RankObservation obs =
        run_rank(c, model::Instance::kDense, r, *sut::behaviour_by_name("pr6982"), kCpu, 1);
    ASSERT_FALSE(obs.error) << *obs.error;
    ASSERT_EQ(obs.groups.at(0).size(), 1u);
    const ObservedTensor& t = obs.groups[0][0];
    EXPECT_TRUE(t.is_leaf);
    EXPECT_FALSE(t.requires_grad);
    EXPECT_TRUE(t.aliases_model);
    EXPECT_EQ(t.alias_offset, r == 0 ? 0 : 128);
    EXPECT_EQ(t.numel, r == 0 ? 128 : 72);
  }
}

}  // namespace
}  // namespace sc::rig
