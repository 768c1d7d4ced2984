// Regression: finding F6 (FINDINGS.md), found 2026-11-29 by StreamSimulation.NoRaceBetweenStreams
// and StreamSimulation.EveryScheduleGivesTheReferenceParams with SC_VARIANT=distopt-load-step
// (pr6982+F1..F5), RC_PARAMS="max_success=300 seed=1". Shrunk case: one 1-element bf16 parameter,
// precision-aware, offload fraction 0, overlap on, one step. With overlap the hybrid optimizer
// casts the grads of accelerator-resident 16-bit parameters to their fp32 copies on its D2H stream,
// and the accelerator FusedAdam then reads them on the current stream, which never waits for the
// D2H stream: a read-after-write race. Run in the latest order the streams allow, the step reads
// the cast's output before it is written.
#include <gtest/gtest.h>

#include <cmath>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

model::CaseSpec f6_minimal_case(bool overlap) {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kBFloat16);
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 0.0;
  c.overlap_cpu_optimizer_d2h_h2d = overlap;
  return c;
}

model::StepInputs step_inputs() {
  model::StepInputs in;
  in.grads = {{0.5f}};
  in.group_hyper = {model::AdamWHyper{1e-3, 0.9, 0.999, 1e-8, 0.0}};
  return in;
}

struct Outcome {
  std::vector<std::string> races;
  float param = 0;
};

// The variant F6 was found on, and it with F6's fix.
constexpr const char* kFoundOn = "pr6982+F1+F2+F3+F4+F5";
constexpr const char* kFixed = "pr6982+F1+F2+F3+F4+F5+F6";

Outcome one_step(const char* variant, bool overlap, model::streams::Policy policy) {
  RankRig rig(f6_minimal_case(overlap), model::Instance::kDense, 0, *sut::behaviour_by_name(variant),
              torch::Device(torch::kCPU), 1, StreamSchedule{policy, 0, true});
  rig.step(step_inputs());
  return Outcome{rig.stream_races(), rig.model_piece(0, 0)[0]};
}

TEST(F6HdoUnsyncedFp32Grads, TheCastAndTheAcceleratorStepRace) {
  const Outcome o = one_step(kFoundOn, true, model::streams::Policy::kEager);
  ASSERT_EQ(o.races.size(), 1u);
  EXPECT_NE(o.races[0].find("\"grad.to(fp32)\" on d2h"), std::string::npos) << o.races[0];
  EXPECT_NE(o.races[0].find("\"accelerator FusedAdam step\" on current"), std::string::npos);
}

TEST(F6HdoUnsyncedFp32Grads, TheLatestLegalOrderStepsWithUnwrittenGrads) {
  const Outcome o = one_step(kFoundOn, true, model::streams::Policy::kAdversarial);
  EXPECT_TRUE(std::isnan(o.param)) << o.param;  // NaN stands for what the device never wrote
  const Outcome eager = one_step(kFoundOn, true, model::streams::Policy::kEager);
  EXPECT_FALSE(std::isnan(eager.param));
}

TEST(F6HdoUnsyncedFp32Grads, WithoutOverlapThereIsOneStreamAndNoRace) {
  EXPECT_TRUE(one_step(kFoundOn, false, model::streams::Policy::kEager).races.empty());
}

TEST(F6HdoUnsyncedFp32Grads, TheProposedFixOrdersTheStepAfterTheCast) {
  const Outcome fixed = one_step(kFixed, true, model::streams::Policy::kAdversarial);
  EXPECT_TRUE(fixed.races.empty());
  EXPECT_EQ(fixed.param, one_step(kFixed, true, model::streams::Policy::kEager).param);
  EXPECT_FALSE(std::isnan(fixed.param));
}

}  // namespace
}  // namespace sc::rig
