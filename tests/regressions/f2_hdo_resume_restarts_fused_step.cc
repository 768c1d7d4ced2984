// Regression: finding F2 (FINDINGS.md), found 2026-11-29 by
// HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption with SC_VARIANT=hdo-accel-grad
// (pr6982+F1), RC_PARAMS="seed=1"; shrunk case: one 1-element fp32 parameter, offload fraction 0,
// save after step 1 of 3. Cause: FusedAdam's step count lives in its group, which load_state_dict's
// rebuild of the sub-optimizers starts afresh.
#include <gtest/gtest.h>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

model::CaseSpec f2_minimal_case() {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kFloat32);
  c.cpu_offload = true;
  c.offload_fraction = 0.0;
  return c;
}

// Runs 3 steps with a resume after the first under `variant`; returns (resumed, uninterrupted).
std::pair<float, float> resume_after_first_step(const char* variant) {
  const model::CaseSpec c = f2_minimal_case();
  const sut::Behaviour b = *sut::behaviour_by_name(variant);
  RankRig a(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 1);
  RankRig z(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 2);
  a.step(test::one_grad_step(0.5f));
  z.load(a.save());
  for (float g : {0.25f, -0.5f}) {
    a.step(test::one_grad_step(g));
    z.step(test::one_grad_step(g));
  }
  return {z.model_piece(0, 0)[0], a.model_piece(0, 0)[0]};
}

TEST(F2HdoResumeFusedStep, WithoutItsFixTheResumeResetsTheStepCount) {
  const auto [resumed, uninterrupted] = resume_after_first_step("pr6982+F1");
  EXPECT_NE(resumed, uninterrupted);
  EXPECT_GT(std::fabs(resumed - uninterrupted), 1e-4f);  // a tenth of lr or more, not rounding
}

TEST(F2HdoResumeFusedStep, TheProposedFixResumesExactly) {
  const auto [resumed, uninterrupted] = resume_after_first_step("pr6982+F1+F2");
  EXPECT_EQ(resumed, uninterrupted);
}

}  // namespace
}  // namespace sc::rig
