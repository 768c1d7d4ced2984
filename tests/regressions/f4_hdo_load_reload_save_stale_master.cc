// Regression: finding F4 (FINDINGS.md), found 2026-11-29 by
// HybridOptimizerState.CommandSequencesMatchTheReference with SC_VARIANT=hdo-reload, now
// pr6982+F1+F2+F3 (CI seed 16026475347000257090, max_success=1000); shrunk: bf16 params, precision-
// aware, offload 1, commands Step, SaveState, Rebuild+LoadState, ReloadModelParams, SaveState,
// Rebuild+LoadState, Step. Cause: after load_state_dict, hdo.state's master_param is the loaded
// tensor rather than the fp32 copy, so a reload before the next step is not what the next save
// writes.
#include <gtest/gtest.h>

#include "model/rounding.h"
#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

model::CaseSpec bf16_offloaded() {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kBFloat16);
  c.precision_aware = true;
  c.cpu_offload = true;
  c.offload_fraction = 1.0;
  return c;
}

// Step, save, load into a fresh rank, reload model params, save, load again, zero-lr step; the
// weight must be the rounded value the reload made the master.
float master_after_load_reload_save_load(const char* variant) {
  const sut::Behaviour b = *sut::behaviour_by_name(variant);
  const torch::Device cpu(torch::kCPU);
  model::StepInputs in;
  in.grads = {{0.5f}};
  in.group_hyper = {model::AdamWHyper{1e-2, 0.9, 0.999, 1e-8, 0.0}};
  RankRig a(bf16_offloaded(), model::Instance::kDense, 0, b, cpu, 1);
  a.step(in);
  RankRig z1(bf16_offloaded(), model::Instance::kDense, 0, b, cpu, 2);
  z1.load(a.save());
  z1.reload_model_params();  // master := the bf16 weight
  RankRig z2(bf16_offloaded(), model::Instance::kDense, 0, b, cpu, 3);
  z2.load(z1.save());
  return z2.optimizer_piece(0, 0)[0];  // the fp32 master z2 resumes from
}

TEST(F4HdoLoadReloadSave, WithoutItsFixTheSaveWritesTheStaleLoadedMaster) {
  const float master = master_after_load_reload_save_load("pr6982+F1+F2+F3");
  EXPECT_NE(master, model::round_to_bf16(master));  // not the reloaded (bf16) value
}

TEST(F4HdoLoadReloadSave, TheProposedFixSavesTheReloadedMaster) {
  const float master = master_after_load_reload_save_load("pr6982+F1+F2+F3+F4");
  EXPECT_EQ(master, model::round_to_bf16(master));
}

}  // namespace
}  // namespace sc::rig
