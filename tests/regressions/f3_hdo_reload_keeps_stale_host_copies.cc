// Regression: finding F3 (FINDINGS.md), found 2026-11-29 by
// HybridOptimizerState.CommandSequencesMatchTheReference with SC_VARIANT=hdo-fused-step
// (pr6982+F1+F2), RC_PARAMS="seed=1"; shrunk: two bf16 params, not precision-aware, offload 1,
// commands Step, ReloadModelParams, Step. Cause: with a hybrid optimizer, reload_model_params only
// calls update_fp32_param_by_new_param, which refreshes fp32 copies of 16-bit params and nothing
// else. The CLI's configuration (precision-aware) shown here: fp32 weights loaded after
// construction are overwritten by the stale host copy at the next step.
#include <gtest/gtest.h>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

model::CaseSpec fp32_param_offloaded() {
  model::CaseSpec c = test::one_param_case("alpha_pre", {1}, model::DType::kFloat32);
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 1.0;
  return c;
}

// Loads 0.75 as the weight (as --finetune does after construction), reloads, takes a zero-lr
// step, and returns the weight.
float weight_after_load_reload_step(const char* variant) {
  RankRig loaded(fp32_param_offloaded(), model::Instance::kDense, 0,
                 *sut::behaviour_by_name(variant), torch::Device(torch::kCPU), 2);
  EXPECT_FALSE(loaded.construction().error);
  loaded.set_model_values({{0.75f}});
  loaded.reload_model_params();
  model::StepInputs in;
  in.grads = {{0.0f}};
  in.group_hyper = {model::AdamWHyper{0.0, 0.9, 0.999, 1e-8, 0.0}};
  loaded.step(in);
  return loaded.model_piece(0, 0)[0];
}

TEST(F3HdoReloadHostCopies, WithoutItsFixLoadedFp32WeightsRevert) {
  EXPECT_NE(weight_after_load_reload_step("pr6982+F1+F2"), 0.75f);
}

TEST(F3HdoReloadHostCopies, TheProposedFixKeepsThem) {
  EXPECT_EQ(weight_after_load_reload_step("pr6982+F1+F2+F3"), 0.75f);
}

}  // namespace
}  // namespace sc::rig
