// Regression: port-fidelity finding P2 (FINDINGS.md), a defect of the port and the model, not of
// Megatron; found 2026-12-01 by RealCodeDiff.PortEqualsMegatronBitForBit against real Megatron
// (the d8b71082 snapshot with patches/pr6982.patch, Transformer Engine's FusedAdam the worker's
// stand-in), RC_PARAMS="max_success=100 seed=7". Shrunk case: two 1-element bf16 parameters,
// dp 1, Transformer Engine, neither precision-aware nor offload, one step: exp_avg -0.013671875 in
// the port, -0.0136718787 in the real code. With TE installed, Megatron's factory makes the plain
// distributed optimizer's inner optimizer TE's FusedAdam (adam_w_mode); the port and the model
// used torch's AdamW there. The two differ in the first moment's weight: AdamW's (1 - beta1)
// is computed in double then rounded, the kernel's is 1.0f - 0.9f in float.
#include <gtest/gtest.h>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

float first_moment_after_unit_grad(bool transformer_engine) {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kBFloat16);
  c.transformer_engine = transformer_engine;
  RankRig rig(c, model::Instance::kDense, 0, sut::fully_patched(), torch::Device(torch::kCPU), 1);
  rig.step(test::one_grad_step(1.0f));
  return rig.state(0, 0).exp_avg.at(0);
}

TEST(P2TePlainOptimizerIsFusedAdam, WithTransformerEngineTheKernelsWeightIsUsed) {
  const float beta1 = 0.9f;
  EXPECT_EQ(first_moment_after_unit_grad(true), 1.0f - beta1);  // 0.099999964
}

TEST(P2TePlainOptimizerIsFusedAdam, WithoutItTorchAdamWsWeightIsUsed) {
  EXPECT_EQ(first_moment_after_unit_grad(false), static_cast<float>(1.0 - 0.9));  // 0.1f
}

}  // namespace
}  // namespace sc::rig
