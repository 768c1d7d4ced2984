// Every known killer the registry names (properties/registry.h: re-injected known bugs, the
// fully patched variant with one fix taken out) fails its property at a fixed RapidCheck seed,
// unshrunk, and the variant the property holds on passes the same run (for a property against
// real code: the same cases, up to the last one a killer needed). Every mutant is named
// somewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "properties/registry.h"
#include "properties/run.h"
#include "properties/support.h"

namespace sc::props {
namespace {

// Case generation as the environment says (SC_TRANSFORMER_ENGINE), as in sc_properties.
const bool kGenerationConfigured = (configure_generation(), true);

// Whether `p` can run here: the differential property needs a Megatron tree.
bool runnable(const Property& p) {
  return p.target != Target::kPortVsRealCode || megatron_tree().has_value();
}

constexpr uint64_t kKillSeed = 1;
constexpr int kKillCases = 200;

// Runs `property` against `b` at the kill tests' seed and budget, unshrunk: a kill test needs the
// failure, not its minimal case (a real-ranks shrink starts a world of processes per step: the
// resume kill tests took 470 s each shrinking, ctest -j2, two cores). Only the first `cases`
// cases run the property; the rest pass without drawing.
RunOutcome kill_run(const Property& property, const sut::Behaviour& b, int cases = kKillCases) {
  RunOptions options;
  options.seed = kKillSeed;
  options.max_success = kKillCases;
  options.shrink = false;
  int run = 0;
  return run_property(
      [&] {
        if (++run <= cases) property.body(b);
      },
      options);
}

// The cases each killer of a property needed at the kill tests' seed, its failing one included
// (kKillCases + 1 where it survived), kept for the process: a property's kill tests and its
// "holds" test run in one ctest test.
int cases_to_kill(const Property& property, const std::string& killer) {
  static std::map<std::pair<std::string, std::string>, int> known;
  const auto key = std::make_pair(property.name, killer);
  if (!known.count(key)) {
    const RunOutcome r = kill_run(property, *sut::behaviour_by_name(killer));
    known[key] = r.failed() ? r.cases : kKillCases + 1;
  }
  return known[key];
}

bool fails(const Property& property, const std::string& killer) {
  return cases_to_kill(property, killer) <= kKillCases;
}

// One known killer of one property, as the registry lists it.
struct Kill {
  const Property* property;
  std::string variant;
};

void PrintTo(const Kill& k, std::ostream* os) { *os << k.variant << " by " << k.property->name; }

std::vector<Kill> known_kills() {
  std::vector<Kill> out;
  for (const Property& p : all_properties()) {
    for (const std::string& killer : p.killers) out.push_back({&p, killer});
  }
  return out;
}

class MutantKill : public ::testing::TestWithParam<Kill> {};

TEST_P(MutantKill, IsKilledByItsProperty) {
  const Kill k = GetParam();
  if (!runnable(*k.property)) GTEST_SKIP() << "needs a Megatron tree in SC_MEGATRON_TREE";
  ASSERT_TRUE(sut::behaviour_by_name(k.variant)) << k.variant;
  EXPECT_TRUE(fails(*k.property, k.variant)) << k.variant << " survives " << k.property->name;
}

// The same runs pass where the property holds: on its own variant, or on the fully patched one.
// A property against real code (real ranks: a world of worker processes per case) passes the
// cases its killers needed: the first failure of each killer is on a case it passes. Its full
// budget runs elsewhere (RealRanks.ResumesOnTheTreeWithEveryPatch, RealRanks.Pr6982Against...).
class HoldsWhereItShould : public ::testing::TestWithParam<const Property*> {};

TEST_P(HoldsWhereItShould, AtTheKillTestsSeed) {
  const Property& p = *GetParam();
  if (!runnable(p)) GTEST_SKIP() << "needs a Megatron tree in SC_MEGATRON_TREE";
  const sut::Behaviour passing = p.target == Target::kOwnVariant
                                     ? *sut::behaviour_by_name(p.own_variant)
                                     : sut::fully_patched();
  int cases = kKillCases;
  if (p.target == Target::kPortVsRealCode) {
    cases = 0;
    for (const std::string& killer : p.killers) {
      cases = std::max(cases, std::min(cases_to_kill(p, killer), kKillCases));
    }
  }
  EXPECT_FALSE(kill_run(p, passing, cases).failed())
      << passing.name << " fails " << p.name << " in its first " << cases << " cases";
}

std::vector<const Property*> killed_properties() {
  std::vector<const Property*> out;
  for (const Property& p : all_properties()) {
    if (!p.killers.empty()) out.push_back(&p);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Registry, HoldsWhereItShould, ::testing::ValuesIn(killed_properties()),
                         [](const ::testing::TestParamInfo<const Property*>& info) {
                           std::string n = info.param->name;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

INSTANTIATE_TEST_SUITE_P(Registry, MutantKill, ::testing::ValuesIn(known_kills()),
                         [](const ::testing::TestParamInfo<Kill>& info) {
                           std::string n = info.param.variant + "_" + info.param.property->name;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

// Every mutant is killed by some property the registry names it under.
TEST(MutantKill, EveryMutantIsAKnownKillerOfSomeProperty) {
  std::set<std::string> named;
  for (const Kill& k : known_kills()) named.insert(k.variant);
  for (const sut::Behaviour& m : sut::all_mutants()) EXPECT_TRUE(named.count(m.name)) << m.name;
}

}  // namespace
}  // namespace sc::props
