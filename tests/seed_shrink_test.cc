// The suite finds the seed defect on its own: run against `upstream`, the leaf property and the
// construction property fail, and RapidCheck shrinks the failure to the seed's minimal case
// (one fp32 parameter, offload on). Fixed RapidCheck seeds keep this test deterministic.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include "properties/diff_props.h"
#include "properties/run.h"
#include "properties/gen/case_gen.h"

namespace sc::props {
namespace {

struct Outcome {
  bool failed = false;
  model::CaseSpec shrunk;  // the last failing case RapidCheck tried: the shrunk one
  std::string reproduce;
};

Outcome check_against(const sut::Behaviour& b, DiffClaim claim, uint64_t seed) {
  Outcome out;
  auto property = [&] {
    const model::CaseSpec c = *gen::case_spec();
    try {
      run_diff_property(c, b, claim);
    } catch (...) {
      out.shrunk = c;
      throw;
    }
  };
  RunOptions options;
  options.seed = seed;
  options.max_success = 300;
  const RunOutcome result = run_property(property, options);
  out.failed = result.failed();
  if (out.failed) out.reproduce = result.description;
  return out;
}

void expect_seed_minimal(const Outcome& o) {
  ASSERT_TRUE(o.failed);
  std::ostringstream shown;
  model::showValue(o.shrunk, shown);
  ASSERT_EQ(o.shrunk.params.size(), 1u) << shown.str();
  EXPECT_EQ(o.shrunk.params[0].dtype, model::DType::kFloat32) << shown.str();
  EXPECT_EQ(o.shrunk.params[0].numel(), 1) << shown.str();
  EXPECT_TRUE(o.shrunk.cpu_offload) << shown.str();
  EXPECT_EQ(o.shrunk.dp, 1) << shown.str();
}

TEST(SeedShrink, ConstructionPropertyShrinksToOneFp32ParamWithOffload) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    expect_seed_minimal(check_against(sut::upstream(), DiffClaim::kConstructs, seed));
  }
}

TEST(SeedShrink, LeafPropertyShrinksToOneFp32ParamWithOffload) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    expect_seed_minimal(check_against(sut::upstream(), DiffClaim::kInstalled, seed));
  }
}

TEST(SeedShrink, TheFixedVariantPassesTheSameRuns) {
  for (DiffClaim claim : {DiffClaim::kConstructs, DiffClaim::kInstalled}) {
    const Outcome o = check_against(sut::fully_patched(), claim, 1);
    EXPECT_FALSE(o.failed) << o.reproduce;
  }
}

}  // namespace
}  // namespace sc::props
