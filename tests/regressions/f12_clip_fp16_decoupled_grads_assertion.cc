// Regression: finding F12 (FINDINGS.md), found 2026-12-02 by
// StepFlow.ClippingAndZeroCountEqualTheModel run against real Megatron code (SC_SUT=megatron,
// the d8b71082 snapshot with patches/pr6982.patch, RC_PARAMS="max_success=15 seed=11"), where
// the port passed: `clip_grad_by_total_norm_fp32` asserts that each decoupled grad is fp32 or
// bf16, so a precision-aware step with an fp16 grad buffer raises a bare AssertionError once
// clipping is on. Shrunk case: one 1-element fp16 parameter, precision-aware, offload fraction
// 1, clip_grad 0.001 times the first norm, one step.
#include <gtest/gtest.h>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

// One clipped step of a precision-aware fp16 parameter: what it raised ("" if nothing) and the
// grad norm it reported.
std::pair<std::string, double> clipped_fp16_step(const char* variant) {
  model::CaseSpec c = test::one_param_case("w", {4}, model::DType::kFloat16);
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 1.0;
  const sut::Behaviour b = *sut::behaviour_by_name(variant);
  RankRig rig(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 1);
  rig.use_grad_stats(/*clip_grad=*/1.0, /*log_num_zeros_in_grad=*/false);
  model::StepInputs in = test::one_grad_step(0.0f);
  in.grads = {{3.0f, 4.0f, 0.0f, 0.0f}};
  try {
    rig.step(in);
  } catch (const c10::Error& e) {
    return {e.msg().substr(0, e.msg().find('\n')), 0.0};
  }
  return {"", *rig.last_step().grad_norm};
}

TEST(F12ClipFp16DecoupledGrads, WithoutItsFixTheClippedStepRaisesAssertionError) {
  EXPECT_EQ(clipped_fp16_step("patched-F12").first.rfind("AssertionError", 0), 0u);
  EXPECT_EQ(clipped_fp16_step("pr6982").first.rfind("AssertionError", 0), 0u);
}

TEST(F12ClipFp16DecoupledGrads, TheProposedFixClipsByTheNorm) {
  const auto [raised, norm] = clipped_fp16_step("patched");
  EXPECT_EQ(raised, "");
  EXPECT_EQ(norm, 5.0);  // torch.norm of fp16 (3, 4, 0, 0) is exactly 5
}

}  // namespace
}  // namespace sc::rig
