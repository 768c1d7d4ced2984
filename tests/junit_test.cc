// shardcheck-verify's JUnit XML on literal outcomes: one testcase per property with its suite as
// classname, a failure carrying the property's words, its case and its replay line, a skipped
// entry with a NOT RUN reason, the counts on both elements, and text escaped as XML needs. A
// review fails only the newly failing. Well under a second.
#include "properties/junit.h"

#include <gtest/gtest.h>

#include <string>

#include "properties/registry.h"

namespace sc::props {
namespace {

const Property& property(const char* name) {
  const Property* p = find_property(name);
  EXPECT_NE(p, nullptr) << name;
  return *p;
}

Outcome failed(const char* name) {
  Outcome o;
  o.property = &property(name);
  o.run.kind = RunOutcome::Kind::kFailed;
  o.run.cases = 3;
  o.run.description = "dense rank 0: p0 <bf16> & \"x\"\nmore words";
  o.run.counterexample = "CaseSpec{dp=2}";
  o.replay = "RC_PARAMS=\"reproduce=AB\" scripts/verify-megatron T --only " + o.property->name;
  o.seconds = 1.5;
  return o;
}

Outcome passed(const char* name) {
  Outcome o;
  o.property = &property(name);
  o.run.cases = 50;
  return o;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(JUnit, ARunHasOneTestcasePerPropertyWithItsFailureAndItsReplay) {
  TreeRun run{"d8b71082", "", {"pr6982.patch"}, {}, {}, 0};
  run.outcomes = {passed("ShardBuilderDiff.PortRangesEqualModelOnEveryRank"),
                  failed("HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption")};
  const Property& skipped =
      property("FusedAdamDiff.EveryTensorFollowsTheFusedOrderEmptyOnesIncluded");
  const std::string xml = junit_xml(run, {&skipped});
  EXPECT_EQ(count(xml, "<testcase "), 3u) << xml;
  EXPECT_NE(xml.find("tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\""), std::string::npos)
      << xml;
  EXPECT_NE(
      xml.find("classname=\"HybridOptimizerDiff\" name=\"SaveLoadContinueEqualsNoInterruption\""
               " time=\"1.500\""),
      std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<failure message=\"dense rank 0: p0 &lt;bf16&gt; &amp; &quot;x&quot;\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("replay: RC_PARAMS=&quot;reproduce=AB&quot; scripts/verify-megatron T"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<skipped message=\""), std::string::npos) << xml;
  EXPECT_EQ(xml.find("<testsuite name=\"megatron d8b71082 with pr6982\""), xml.find("<testsuite "))
      << xml;
}

TEST(JUnit, AReviewFailsOnlyWhatIsNewlyFailing) {
  Review review;
  review.before = review.after = TreeRun{"d8b71082", "", {}, {}, {}, 0};
  review.fix = "fix.patch";
  ReviewedProperty still{failed("HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption"),
                         failed("HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption"),
                         Verdict::kStillFailing,
                         {"F3"}};
  ReviewedProperty fresh{passed("ShardBuilderDiff.PortRangesEqualModelOnEveryRank"),
                         failed("ShardBuilderDiff.PortRangesEqualModelOnEveryRank"),
                         Verdict::kNewlyFailing,
                         {}};
  review.properties = {still, fresh};
  review.claim_failures = {"F3: its regression case still fails with the patch"};
  const std::string xml = junit_xml(review, {});
  EXPECT_NE(xml.find("tests=\"3\" failures=\"2\""), std::string::npos) << xml;
  EXPECT_EQ(count(xml, "<failure "), 2u) << xml;
  EXPECT_NE(xml.find("name=\"PortRangesEqualModelOnEveryRank\" time=\"1.500\">\n      <failure"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("classname=\"Claim\" name=\"NotMet\""), std::string::npos) << xml;
}

}  // namespace
}  // namespace sc::props
