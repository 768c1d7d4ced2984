// A review's claim that a fix fixes a finding (properties/verify_report.h, judge_claim), on
// literal outcomes: decided by the finding's own regression cases; a failure of their property
// that another known finding explains (a base that had to leave that finding's patch out) keeps
// the claim and is named as still failing; an unexplained one, or one the claimed finding's own
// case reproduces, breaks it. Well under a second.
#include <gtest/gtest.h>

#include <string>

#include "properties/registry.h"
#include "properties/verify_report.h"

namespace sc::props {
namespace {

const char* const kGathered = "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState";

// A review whose only property, kGathered, has `verdict` and, failing after the fix, the known
// findings `findings` whose regression cases reproduce it.
Review review_with(Verdict verdict, std::vector<std::string> findings) {
  ReviewedProperty p;
  p.before.property = p.after.property = find_property(kGathered);
  EXPECT_NE(p.after.property, nullptr);
  const bool after_fails = verdict == Verdict::kStillFailing || verdict == Verdict::kNewlyFailing;
  const bool before_fails = verdict == Verdict::kStillFailing || verdict == Verdict::kFixed;
  p.after.run.kind = after_fails ? RunOutcome::Kind::kFailed : RunOutcome::Kind::kPassed;
  p.before.run.kind = before_fails ? RunOutcome::Kind::kFailed : RunOutcome::Kind::kPassed;
  p.verdict = verdict;
  p.findings = std::move(findings);
  Review r;
  r.properties.push_back(p);
  return r;
}

TEST(ReviewClaim, AFailureAnotherFindingExplainsKeepsTheClaimAndIsNamed) {
  // F9's fix reviewed on a base without F15's patch: F9's case passes, the property still fails
  // on F15's case.
  Review r = review_with(Verdict::kStillFailing, {"F15"});
  judge_claim(r, "F9", {{kGathered, false}});
  EXPECT_TRUE(r.claim_failures.empty()) << r.claim_failures.front();
  ASSERT_EQ(r.claims.size(), 1u);
  EXPECT_EQ(r.claims[0], std::string("F9; still failing: F15 (") + kGathered + ")");
  EXPECT_FALSE(r.failed());
}

TEST(ReviewClaim, TheClaimedFindingsOwnCaseStillFailingBreaksIt) {
  Review r = review_with(Verdict::kStillFailing, {"F9"});
  judge_claim(r, "F9", {{kGathered, true}});
  ASSERT_EQ(r.claim_failures.size(), 2u);
  EXPECT_EQ(r.claim_failures[0],
            std::string("F9: its regression case (") + kGathered + ") still fails with the patch");
  EXPECT_EQ(r.claim_failures[1], std::string("F9: ") + kGathered + " is still failing");
  EXPECT_TRUE(r.failed());
}

TEST(ReviewClaim, AFailureNoKnownFindingExplainsBreaksIt) {
  for (const Verdict v : {Verdict::kStillFailing, Verdict::kNewlyFailing}) {
    Review r = review_with(v, {});
    judge_claim(r, "F9", {{kGathered, false}});
    ASSERT_EQ(r.claim_failures.size(), 1u) << verdict_text(v);
    EXPECT_EQ(r.claim_failures[0], std::string("F9: ") + kGathered + " is " + verdict_text(v));
  }
}

TEST(ReviewClaim, WithNoCaseAgainstRealCodeTheMegatronStyleTestDecides) {
  Review r = review_with(Verdict::kPassesBoth, {});
  judge_claim(r, "F14", {});
  EXPECT_TRUE(r.claim_failures.empty());
  ASSERT_EQ(r.claims.size(), 1u);
  EXPECT_EQ(r.claims[0], "F14 (no regression case of it runs against real code; its "
                         "Megatron-style test decides it)");
}

}  // namespace
}  // namespace sc::props
