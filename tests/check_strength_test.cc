// Each property's check is shown to fail: on a corrupted layout for the model laws, and on a
// known-bad variant (upstream, a mutant) for the diff checks. A check that cannot fail proves
// nothing.
#include <gtest/gtest.h>

#include "model/layout.h"
#include "model/shard.h"
#include "properties/checks.h"
#include "sim/rig/rank_rig.h"
#include "tests/support/devices.h"

namespace sc::props {
namespace {


model::CaseSpec mixed_case() {
  model::CaseSpec c;
  auto add = [&](const std::string& n, int64_t numel, model::DType d) {
    model::ParamSpec p;
    p.name = n;
    p.shape = {numel};
    p.dtype = d;
    c.params.push_back(p);
  };
  add("emb", 400, model::DType::kBFloat16);
  add("alpha", 70, model::DType::kFloat32);
  add("w", 300, model::DType::kBFloat16);
  c.dp = 2;
  return c;
}

TEST(CheckStrength, OwnershipCheckCatchesAShrunkenParameter) {
  model::CaseSpec c = mixed_case();
  auto ls = model::full_param_layout(c);
  ASSERT_FALSE(check_ownership(c, ls));
  c.params[0].shape = {500};  // the layout no longer covers the parameter
  const Violation v = check_ownership(c, ls);
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("cover"), std::string::npos) << *v;
}

TEST(CheckStrength, OwnershipCheckCatchesARaggedBucket) {
  model::CaseSpec c = mixed_case();
  auto ls = model::full_param_layout(c);
  ls[0].buckets[0].end += 1;  // no longer divisible by dp: ranks cannot tile it
  EXPECT_TRUE(check_ownership(c, ls));
}

TEST(CheckStrength, LayoutRuleCheckCatchesMisalignmentOrderAndDivisor) {
  const model::CaseSpec c = mixed_case();
  const auto good = model::full_param_layout(c);
  ASSERT_FALSE(check_layout_rules(c, good));
  auto misaligned = good;
  misaligned[0].placements[1].range = misaligned[0].placements[1].range.normalize(
      misaligned[0].placements[1].range.start - 1);
  EXPECT_TRUE(check_layout_rules(c, misaligned));
  auto forward = good;
  std::swap(forward[0].placements[0].param, forward[0].placements[1].param);
  EXPECT_TRUE(check_layout_rules(c, forward));
  // lcm replaced by product: at dp 4 the bucket would end at a multiple of 512, not of 128.
  model::CaseSpec c4 = c;
  c4.dp = 4;
  auto product = model::full_param_layout(c4);
  ASSERT_FALSE(check_layout_rules(c4, product));
  product[0].buckets[0].end = model::pad_to_divisor(product[0].buckets[0].end, 512);
  EXPECT_TRUE(check_layout_rules(c4, product));
}

TEST(CheckStrength, RangeCheckKillsMutantMeg03) {
  const model::CaseSpec c = mixed_case();
  const auto ls = model::full_param_layout(c);
  const auto plan = model::plan_rank(c, ls, model::Instance::kDense, 1);
  const auto good = rig::run_rank(c, model::Instance::kDense, 1, sut::fully_patched(), kCpu, 1);
  EXPECT_FALSE(check_ranges(plan, good));
  const auto bad =
      rig::run_rank(c, model::Instance::kDense, 1, *sut::behaviour_by_name("MEG-03"), kCpu, 1);
  const Violation v = check_ranges(plan, bad);
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("world range"), std::string::npos) << *v;
}

TEST(CheckStrength, InstalledCheckKillsUpstreamAndMutantsMeg01Meg02) {
  const model::CaseSpec c = mixed_case();
  const auto ls = model::full_param_layout(c);
  const auto plan = model::plan_rank(c, ls, model::Instance::kDense, 0);
  EXPECT_FALSE(check_installed(
      c, plan, rig::run_rank(c, model::Instance::kDense, 0, sut::fully_patched(), kCpu, 1)));
  for (const char* name : {"upstream", "MEG-01"}) {
    const Violation v = check_installed(
        c, plan,
        rig::run_rank(c, model::Instance::kDense, 0, *sut::behaviour_by_name(name), kCpu, 1));
    ASSERT_TRUE(v) << name;
    EXPECT_NE(v->find("must be a leaf"), std::string::npos) << *v;
  }
  const Violation v = check_installed(
      c, plan,
      rig::run_rank(c, model::Instance::kDense, 0, *sut::behaviour_by_name("MEG-02"), kCpu, 1));
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("model_param_group_index_map"), std::string::npos) << *v;
}

TEST(CheckStrength, ConstructionCheckKillsUpstreamWithOffload) {
  model::CaseSpec c = mixed_case();
  c.cpu_offload = true;
  EXPECT_FALSE(check_constructed(
      rig::run_rank(c, model::Instance::kDense, 0, sut::fully_patched(), kCpu, 1)));
  EXPECT_TRUE(
      check_constructed(rig::run_rank(c, model::Instance::kDense, 0, sut::upstream(), kCpu, 1)));
}

TEST(CheckStrength, FailingRanksCheckRejectsAVariantThatDoesNotFail) {
  model::CaseSpec c = mixed_case();
  c.cpu_offload = true;
  const auto ls = model::full_param_layout(c);
  const auto predicted = model::upstream_failing_ranks(c, ls, model::Instance::kDense);
  ASSERT_FALSE(predicted.empty());
  std::vector<rig::RankObservation> up, fixed;
  for (int64_t r = 0; r < c.dp; ++r) {
    up.push_back(rig::run_rank(c, model::Instance::kDense, r, sut::upstream(), kCpu, 1));
    fixed.push_back(rig::run_rank(c, model::Instance::kDense, r, sut::fully_patched(), kCpu, 1));
  }
  EXPECT_FALSE(check_failing_ranks(predicted, up));
  EXPECT_TRUE(check_failing_ranks(predicted, fixed));
}

}  // namespace
}  // namespace sc::props

namespace sc::props {
namespace {

// The "threshold tested after adding" mutant of the offload rule.
model::OffloadPlan plan_offload_after_adding(const std::vector<std::vector<model::HdoTensor>>& groups,
                                             const model::HdoConfig& config) {
  model::OffloadPlan plan = model::plan_offload(groups, config);
  int64_t total = 0, running = 0;
  for (const auto& g : groups) {
    for (const auto& t : g) total += t.numel;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      running += groups[g][i].numel;
      plan.placements[g][i].offloaded =
          static_cast<double>(running) <= config.offload_fraction * static_cast<double>(total);
    }
  }
  return plan;
}

TEST(CheckStrength, OffloadLawsRejectAThresholdTestedAfterAdding) {
  // [300, 200] at fraction 0.5: target 250. The rule offloads the first (0 < 250); testing after
  // adding offloads nothing (300 > 250), short of the target.
  const std::vector<std::vector<model::HdoTensor>> groups{{{300, model::DType::kFloat32},
                                                           {200, model::DType::kFloat32}}};
  EXPECT_FALSE(check_offload_laws(groups, 0.5, 1.0));
  const Violation v = check_offload_laws(groups, 0.5, 1.0, &plan_offload_after_adding);
  ASSERT_TRUE(v);
  EXPECT_NE(v->find("short of target"), std::string::npos) << *v;
}

}  // namespace
}  // namespace sc::props
