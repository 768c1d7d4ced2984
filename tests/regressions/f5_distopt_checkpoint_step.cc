// Regression: finding F5 (FINDINGS.md), found 2026-11-29 by
// DistributedCheckpoint.ResumeEqualsNoInterruption with SC_VARIANT=hdo-load-alias
// (pr6982+F1+F2+F3+F4). Shrunk cases: one 1-element parameter, dp 1, resumed after the first step
// (after the second at fraction 0, where the loading rank's dummy step happens to give the right
// count after one). With torch's AdamW as the optimizer (no Transformer Engine) a fresh
// DistributedOptimizer's state_dict() asserts one step among no state; once that passes, the
// "fully_sharded_model_space" loader drops `step` and then looks up every live state tensor, `step`
// included (KeyError). A non-precision-aware hybrid optimizer hits the KeyError through its host
// AdamW; at offload fraction 0 it has none, saves no step, and its FusedAdam restarts at step 1.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

struct Resume {
  std::string error;  // what loading raised, empty if it loaded
  float resumed = 0, uninterrupted = 0;
};

// Steps `before` times, saves, loads into a fresh rank with other initial values, steps twice
// more.
Resume resume_after(int before, const model::CaseSpec& c, const char* variant) {
  const sut::Behaviour b = *sut::behaviour_by_name(variant);
  RankRig a(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 1);
  RankRig z(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 2);
  for (int k = 0; k < before; ++k) a.step(test::one_grad_step(0.5f));
  Resume r;
  try {
    z.load_distributed(a.save_distributed(nullptr));
  } catch (const c10::Error& e) {
    r.error = e.msg();
    return r;
  }
  for (float g : {0.25f, -0.5f}) {
    a.step(test::one_grad_step(g));
    z.step(test::one_grad_step(g));
  }
  r.resumed = z.optimizer_piece(0, 0)[0];
  r.uninterrupted = a.optimizer_piece(0, 0)[0];
  return r;
}

model::CaseSpec torch_adamw_case() {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kBFloat16);
  c.transformer_engine = false;  // no offload, no PA, no TE: the factory's torch AdamW
  return c;
}

model::CaseSpec hybrid_case(double fraction) {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kBFloat16);
  c.cpu_offload = true;
  c.offload_fraction = fraction;
  return c;
}

TEST(F5DistOptCheckpointStep, TorchAdamWCannotStartLoadingIntoAFreshOptimizer) {
  const Resume r = resume_after(1, torch_adamw_case(), "pr6982+F1+F2+F3+F4");
  EXPECT_EQ(r.error, "AssertionError: len(steps) == 1");
}

TEST(F5DistOptCheckpointStep, HostAdamWStepIsLookedUpAfterTheLoaderDroppedIt) {
  const Resume r = resume_after(1, hybrid_case(1.0), "pr6982+F1+F2+F3+F4");
  EXPECT_EQ(r.error, "KeyError: 'step'");
}

TEST(F5DistOptCheckpointStep, WithoutAHostAdamWTheFusedStepRestarts) {
  const Resume r = resume_after(2, hybrid_case(0.0), "pr6982+F1+F2+F3+F4");
  ASSERT_EQ(r.error, "");
  EXPECT_GT(std::fabs(r.resumed - r.uninterrupted), 1e-5f);  // bias correction of step 2, not 3
}

TEST(F5DistOptCheckpointStep, TheProposedFixResumesExactly) {
  for (int before : {1, 2}) {
    for (const model::CaseSpec& c : {torch_adamw_case(), hybrid_case(1.0), hybrid_case(0.0)}) {
      const Resume r = resume_after(before, c, "pr6982+F1+F2+F3+F4+F5");
      ASSERT_EQ(r.error, "");
      EXPECT_EQ(r.resumed, r.uninterrupted);
    }
  }
}

}  // namespace
}  // namespace sc::rig
