// Variant names compose (sim/port/behaviour.h) from the deviation table's rows
// (sim/port/deviation.h): upstream plus changes joined with '+', taken out with '-'; the names of
// earlier releases are aliases of their sets; mutants keep their names; a name with an unknown or
// empty part is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "sim/port/behaviour.h"

namespace sc::sut {
namespace {

// Every flag of `b` except its name, as a string (two behaviours with equal strings act alike).
std::string flags(const Behaviour& b) {
  return b.on.to_string() + (b.is_mutant ? "/mutant/" : "/") + std::to_string(b.pipeline_chunk);
}

std::string flags_of(const std::string& name) {
  const auto b = behaviour_by_name(name);
  return b ? flags(*b) : "unknown";
}

// The old chain names, as earlier releases wrote them out: a literal list, so that a change to
// the table that moves an alias fails here.
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

// Each row's change sets its own flag and only that (the pipelined engine also the fused host
// AdamW it runs on); each mutant is its base with its one flag changed.
TEST(Variants, EachRowChangesItsOwnFlagAndOnlyThat) {
  const std::string base = flags(upstream());
  for (const DeviationRow& r : deviation_table()) {
    if (r.kind == DeviationKind::kMutant) {
      const auto m = behaviour_by_name(r.name);
      ASSERT_TRUE(m) << r.name;
      Behaviour expected = *behaviour_by_name(r.base);
      ASSERT_NE(expected.has(r.flag), r.value) << r.name << " changes nothing in " << r.base;
      expected.set(r.flag, r.value);
      expected.is_mutant = true;
      EXPECT_EQ(flags(*m), flags(expected)) << r.name;
      continue;
    }
    const std::string with = flags_of(r.name);
    int differing = 0;
    for (size_t k = 0; k < kDeviationCount; ++k) differing += with[k] != base[k];
    EXPECT_EQ(differing, r.flag == Deviation::kPipelined ? 2 : 1) << r.name << ": " << with;
    EXPECT_TRUE(behaviour_by_name(r.name)->has(r.flag)) << r.name;
    EXPECT_EQ(flags_of("upstream+" + std::string(r.name)), with);
    if (*r.alias != '\0') {
      EXPECT_EQ(flags_of(r.alias), with) << r.alias;
    }
  }
  EXPECT_EQ(flags_of("F7"), flags_of("pr5077"));
  EXPECT_EQ(behaviour_by_name("patched+pipelined")->pipeline_chunk, 4096);
  EXPECT_TRUE(behaviour_by_name("patched+pipelined")->has(Deviation::kFusedHostAdamw));
}

// The table is whole: every deviation is the flag of exactly one change or re-injecting mutant,
// names are unique, fixes name what they fix, mutants their base.
TEST(Variants, EveryDeviationHasExactlyOneRow) {
  std::vector<int> owners(kDeviationCount, 0);
  std::set<std::string> names;
  for (const DeviationRow& r : deviation_table()) {
    EXPECT_TRUE(names.insert(r.name).second) << "two rows named " << r.name;
    EXPECT_NE(*r.doc, '\0') << r.name << " has no doc line";
    if (r.kind == DeviationKind::kFix) {
      EXPECT_NE(*r.finding, '\0') << r.name;
    }
    if (r.kind == DeviationKind::kMutant) {
      EXPECT_NE(*r.base, '\0') << r.name;
    }
    if (r.value) ++owners[static_cast<size_t>(r.flag)];
  }
  for (size_t k = 0; k < kDeviationCount; ++k) EXPECT_EQ(owners[k], 1) << "deviation " << k;
  EXPECT_EQ(all_mutants().size(),
            static_cast<size_t>(std::count_if(
                deviation_table().begin(), deviation_table().end(),
                [](const DeviationRow& r) { return r.kind == DeviationKind::kMutant; })));
}

TEST(Variants, MinusTakesAChangeOutAgain) {
  const auto without = behaviour_by_name("patched-F3");
  ASSERT_TRUE(without);
  EXPECT_FALSE(without->has(Deviation::kF3));
  EXPECT_EQ(flags_of("patched-F3+F3"), flags_of("patched"));
  EXPECT_EQ(flags_of("pr6982+F1-F1"), flags_of("pr6982"));
  EXPECT_EQ(flags_of("patched+pipelined-pipelined"), flags_of("patched"));
  EXPECT_EQ(without->name, "patched-F3");
}

TEST(Variants, MutantsKeepTheirNamesAndAreTheFullyPatchedVariantWithOneBug) {
  const auto meg01 = behaviour_by_name("MEG-01");
  ASSERT_TRUE(meg01);
  EXPECT_TRUE(meg01->is_mutant);
  EXPECT_FALSE(meg01->has(Deviation::kPr6982));
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
