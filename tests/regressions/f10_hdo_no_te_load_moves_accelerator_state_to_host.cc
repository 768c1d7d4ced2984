// Regression: finding F10 (FINDINGS.md), found 2026-12-01 by
// HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption on the fully patched variant once
// cases were drawn without Transformer Engine, RC_PARAMS="max_success=100 seed=3"; shrunk case:
// one 1-element bf16 parameter, offload fraction 0, overlap on, save after step 1 of 2. Cause:
// without Transformer Engine both of the factory's classes are torch.optim.AdamW, so
// `_move_new_state_to_right_device` takes the accelerator sub-optimizer for a host one
// (`isinstance(optimizer, cpu_optimizer_cls)`) and moves its loaded state to the host; the next
// step mixes devices.
#include <gtest/gtest.h>

#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

model::CaseSpec f10_minimal_case() {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kBFloat16);
  c.cpu_offload = true;
  c.offload_fraction = 0.0;
  c.transformer_engine = false;
  return c;
}

// Saves after one step and loads into a fresh rank under `variant`: whether the loaded first
// moment is on the host, what the next step raised (empty: nothing) and whether it then equals
// the uninterrupted run.
struct Resumed {
  bool moment_on_host = false;
  std::string error;
  bool equal = false;
};

Resumed resume_and_step(const char* variant) {
  const model::CaseSpec c = f10_minimal_case();
  const sut::Behaviour b = *sut::behaviour_by_name(variant);
  RankRig a(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 1);
  RankRig z(c, model::Instance::kDense, 0, b, torch::Device(torch::kCPU), 2);
  a.step(test::one_grad_step(0.5f));
  z.load(a.save());
  Resumed out;
  out.moment_on_host = z.placement(0, 0).state_on_host.at("exp_avg");
  a.step(test::one_grad_step(0.25f));
  try {
    z.step(test::one_grad_step(0.25f));
  } catch (const c10::Error& e) {
    out.error = e.msg();
    return out;
  }
  out.equal = z.model_piece(0, 0) == a.model_piece(0, 0);
  return out;
}

TEST(F10HdoNoTeLoadState, WithoutItsFixTheNextStepMixesDevices) {
  const Resumed r = resume_and_step("patched-F10");
  EXPECT_TRUE(r.moment_on_host);
  EXPECT_NE(r.error.find("Expected all tensors to be on the same device"), std::string::npos)
      << r.error;
}

TEST(F10HdoNoTeLoadState, TheProposedFixResumesExactly) {
  const Resumed r = resume_and_step("patched");
  EXPECT_FALSE(r.moment_on_host);
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(r.equal);
}

}  // namespace
}  // namespace sc::rig
