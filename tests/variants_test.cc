// Variant names compose (sim/port/behaviour.h): upstream plus changes joined with '+', taken out
// with '-'; the names of earlier releases are aliases of their sets; mutants keep their names;
// a name with an unknown or empty part is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/port/behaviour.h"

namespace sc::sut {
namespace {

// Every flag of `b` except its name, as a string (two behaviours with equal strings act alike).
std::string flags(const Behaviour& b) {
  const std::vector<bool> on = {
      b.detach_fp32_shard, b.fix_hdo_accelerator_decoupled_grad, b.fix_hdo_restore_fused_step,
      b.fix_hdo_reload_refreshes_copies, b.fix_hdo_master_alias_after_load,
      b.fix_distopt_load_skips_step, b.fix_hdo_accelerator_waits_d2h, b.fix_hdo_pin_fp32_copies,
      b.fix_distopt_reshard_padding, b.fix_distopt_dp_zero_syncs_hdo,
      b.fix_distopt_gathered_remainders, b.fix_hdo_state_device_by_identity,
      b.fix_hdo_load_empty_state, b.fix_clip_fp16_decoupled_grads, b.fused_host_adamw,
      b.is_mutant};
  std::string out;
  for (bool flag : on) out += flag ? '1' : '0';
  return out + "/" + std::to_string(b.pipeline_chunk);
}

std::string flags_of(const std::string& name) {
  const auto b = behaviour_by_name(name);
  return b ? flags(*b) : "unknown";
}

TEST(Variants, TheOldChainNamesAreAliasesOfTheirSets) {
  const std::vector<std::pair<std::string, std::string>> aliases = {
      {"hdo-accel-grad", "pr6982+F1"},
      {"hdo-fused-step", "pr6982+F1+F2"},
      {"hdo-reload", "pr6982+F1+F2+F3"},
      {"hdo-load-alias", "pr6982+F1+F2+F3+F4"},
      {"distopt-load-step", "pr6982+F1+F2+F3+F4+F5"},
      {"hdo-grad-stream", "pr6982+F1+F2+F3+F4+F5+F6"},
      {"hdo-pin-fp32", "pr6982+F1+F2+F3+F4+F5+F6+pr4547"},
      {"distopt-reshard-padding", "pr6982+F1+F2+F3+F4+F5+F6+pr4547+F7"},
      {"distopt-dp-zero-sync", "pr6982+F1+F2+F3+F4+F5+F6+pr4547+F7+F8"},
      {"distopt-gathered-remainders", "pr6982+F1+F2+F3+F4+F5+F6+pr4547+F7+F8+F9"},
      {"hdo-fused-host-adamw", "patched+fused-host-adamw"},
      {"hdo-pipelined", "patched+pipelined"},
  };
  for (const auto& [alias, set] : aliases) EXPECT_EQ(flags_of(alias), flags_of(set)) << alias;
  EXPECT_EQ(flags_of("patched"), flags(fully_patched()));
  EXPECT_EQ(flags_of("upstream"), flags(upstream()));
}

TEST(Variants, EachChangeSetsItsOwnFlagAndOnlyThat) {
  const Behaviour base = upstream();
  for (const std::string change : {"pr6982", "F1", "F2", "F3", "F4", "F5", "F6", "pr4547", "F7",
                                   "F8", "F9", "F10", "F11", "F12", "fused-host-adamw"}) {
    const std::string with = flags_of(change);
    int differing = 0;
    for (size_t k = 0; k < with.size(); ++k) differing += with[k] != flags(base)[k];
    EXPECT_EQ(differing, 1) << change << ": " << with;
    EXPECT_EQ(flags_of("upstream+" + change), with);
  }
  EXPECT_EQ(flags_of("F7"), flags_of("pr5077"));
  EXPECT_EQ(behaviour_by_name("patched+pipelined")->pipeline_chunk, 4096);
  EXPECT_TRUE(behaviour_by_name("patched+pipelined")->fused_host_adamw);
}

TEST(Variants, MinusTakesAChangeOutAgain) {
  const auto without = behaviour_by_name("patched-F3");
  ASSERT_TRUE(without);
  EXPECT_FALSE(without->fix_hdo_reload_refreshes_copies);
  EXPECT_EQ(flags_of("patched-F3+F3"), flags_of("patched"));
  EXPECT_EQ(flags_of("pr6982+F1-F1"), flags_of("pr6982"));
  EXPECT_EQ(flags_of("patched+pipelined-pipelined"), flags_of("patched"));
  EXPECT_EQ(without->name, "patched-F3");
}

TEST(Variants, MutantsKeepTheirNamesAndAreTheFullyPatchedVariantWithOneBug) {
  const auto meg01 = behaviour_by_name("MEG-01");
  ASSERT_TRUE(meg01);
  EXPECT_TRUE(meg01->is_mutant);
  EXPECT_FALSE(meg01->detach_fp32_shard);
  EXPECT_TRUE(behaviour_by_name("RULE-align-off-by-one"));
  EXPECT_EQ(behaviour_by_name("PIPE-no-chunk-wait")->pipeline_chunk, 4096);
}

TEST(Variants, ANameWithAnUnknownOrEmptyPartIsRefused) {
  for (const std::string bad : {"", "nope", "pr6982+F13", "patched-", "+F1", "F1++F2", "pr6982 ",
                                "patched+MEG-01", "Patched"}) {
    EXPECT_FALSE(behaviour_by_name(bad)) << "'" << bad << "'";
  }
}

TEST(Variants, AllTheNamedVariantsCompose) {
  std::vector<std::string> names;
  for (const Behaviour& b : all_behaviours()) {
    names.push_back(b.name);
    EXPECT_TRUE(behaviour_by_name(b.name)) << b.name;
  }
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names.front(), "upstream");
  EXPECT_EQ(names[1], "pr6982");
  EXPECT_EQ(names[2], "pr6982+F1");
}

}  // namespace
}  // namespace sc::sut
