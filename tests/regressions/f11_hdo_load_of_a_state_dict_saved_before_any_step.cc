// Regression: finding F11 (FINDINGS.md), found 2026-12-01 by
// HybridOptimizerState.CommandSequencesMatchTheReference run against real Megatron code
// (SC_SUT=megatron, the d8b71082 snapshot with patches/pr6982.patch, RC_PARAMS="max_success=100
// seed=3"), where the port passed: a faithfulness finding in the port, now reproduced by it.
// Shrunk case: one 14-element bf16 parameter, offload fraction 1, commands SaveState then
// Rebuild+LoadState. Cause: under param_update_in_fp32 the post-load hook rebuilds hdo.state as
// a plain dict, and `_sync_hdo_state_to_sub_optimizers` looks every parameter up in it.
#include <gtest/gtest.h>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

// Saves a fresh rank (no step yet) and loads that into another: what the load raised, if
// anything.
std::string load_before_any_step(const char* variant) {
  model::CaseSpec c = test::one_param_case("w", {14}, model::DType::kBFloat16);
  c.cpu_offload = true;
  c.offload_fraction = 1.0;
  const sut::Behaviour b = *sut::behaviour_by_name(variant);
  RankRig a(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 1);
  RankRig z(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 2);
  try {
    z.load(a.save());
  } catch (const c10::Error& e) {
    return e.msg();
  }
  return "";
}

TEST(F11HdoLoadEmptyState, WithoutItsFixTheLoadRaisesKeyError) {
  EXPECT_NE(load_before_any_step("patched-F11").find("KeyError"), std::string::npos);
}

TEST(F11HdoLoadEmptyState, TheProposedFixLoads) { EXPECT_EQ(load_before_any_step("patched"), ""); }

}  // namespace
}  // namespace sc::rig
