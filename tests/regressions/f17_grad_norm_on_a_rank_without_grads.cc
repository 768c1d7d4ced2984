// Regression: finding F17 (FINDINGS.md), found 2026-12-07 by
// StepFlow.DirectGradNormOfEveryTypeEqualsTheModel against real Megatron code (the d8b71082
// snapshot with every finding's patch, RC_PARAMS="max_success=100 seed=1"), and on the port's
// upstream behaviour: `get_grad_norm_fp32` called with the inf norm on a rank without grads
// raises ValueError (`max()` of an empty sequence); with a p-norm other than 2, TypeError (the
// all-reduce of the Python float 0.0). Shrunk case: norm type inf, one rank, no grads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sim/rig/grad_norm_call.h"

namespace sc::rig {
namespace {

GradNormOutcome call(const char* variant, double norm_type,
                     std::vector<std::vector<std::vector<float>>> grads) {
  Target t;
  t.behaviour = *sut::behaviour_by_name(variant);
  return call_grad_norm(t, GradNormCall{std::move(grads), norm_type});
}

const double kInf = std::numeric_limits<double>::infinity();

TEST(F17GradNormOnARankWithoutGrads, WithoutItsFixTheEmptyRankRaises) {
  for (const char* variant : {"pr6982", "patched-F17"}) {
    const GradNormOutcome inf = call(variant, kInf, {{}});
    EXPECT_EQ(inf.raised, "ValueError: max() arg is an empty sequence") << variant;
    const GradNormOutcome p3 = call(variant, 3.0, {{{3.0f, -4.0f}}, {}});
    EXPECT_EQ(p3.raising_rank, 1) << variant;
    EXPECT_EQ(p3.raised.rfind("TypeError: ", 0), 0u) << variant << ": " << p3.raised;
  }
}

TEST(F17GradNormOnARankWithoutGrads, WithItTheEmptyRankSharesZero) {
  EXPECT_EQ(call("patched", kInf, {{}}).norms, std::vector<double>{0.0});
  EXPECT_EQ(call("pr6982+F17", kInf, {{{3.0f, -4.0f}}, {}}).norms,
            (std::vector<double>{4.0, 4.0}));
  // 1 + 27 + 64 = 92, each term exact in fp32; its cube root in double.
  const GradNormOutcome p3 = call("patched", 3.0, {{}, {{1.0f}, {3.0f, -4.0f}}});
  ASSERT_EQ(p3.norms.size(), 2u);
  EXPECT_EQ(p3.norms[0], std::pow(92.0, 1.0 / 3.0));
  EXPECT_EQ(p3.norms[1], p3.norms[0]);
}

}  // namespace
}  // namespace sc::rig
