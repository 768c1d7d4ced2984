// Every known killer the registry names (properties/registry.h: re-injected known bugs, the
// fully patched variant with one fix taken out) fails its property at a fixed RapidCheck seed,
// unshrunk, and the variant the property holds on passes the same run. Every mutant is named
// somewhere.
#include <gtest/gtest.h>

#include <cctype>
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

bool fails(const Property& property, const sut::Behaviour& b, uint64_t seed) {
  RunOptions options;
  options.seed = seed;
  options.max_success = 200;
  // A kill test needs the failure, not its minimal case: a real-ranks shrink starts a world of
  // processes per step (the resume kill tests took 470 s each shrinking, ctest -j2, two cores).
  options.shrink = false;
  return run_property([&] { property.body(b); }, options).failed();
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
  const auto b = sut::behaviour_by_name(k.variant);
  ASSERT_TRUE(b) << k.variant;
  EXPECT_TRUE(fails(*k.property, *b, 1)) << k.variant << " survives " << k.property->name;
}

// The same runs pass where the property holds: on its own variant, or on the fully patched one.
class HoldsWhereItShould : public ::testing::TestWithParam<const Property*> {};

TEST_P(HoldsWhereItShould, AtTheKillTestsSeed) {
  const Property& p = *GetParam();
  if (!runnable(p)) GTEST_SKIP() << "needs a Megatron tree in SC_MEGATRON_TREE";
  const sut::Behaviour passing = p.target == Target::kOwnVariant
                                     ? *sut::behaviour_by_name(p.own_variant)
                                     : sut::fully_patched();
  EXPECT_FALSE(fails(p, passing, 1)) << passing.name << " fails " << p.name;
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
