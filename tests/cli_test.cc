// The shardcheck-sim command line: bad input gets a clear message and exit status 2; a small
// world prints one row per rank for each variant.
#include <gtest/gtest.h>

#include <sstream>

#include "sim/cli.h"

namespace sc::sim {
namespace {

struct CliRun {
  int status;
  std::string out, err;
};

CliRun run(std::vector<std::string> args) {
  std::ostringstream out, err;
  const int status = cli_main(args, out, err);
  return {status, out.str(), err.str()};
}

void expect_rejected(std::vector<std::string> args, const std::string& message) {
  const CliRun r = run(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << "stderr: " << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(Cli, RejectsDpZero) { expect_rejected({"--dp=0"}, "--dp=0: expected an integer from 1"); }

TEST(Cli, RejectsOffloadFractionAboveOne) {
  expect_rejected({"--offload-fraction=1.5"}, "the offload fraction must be a number in [0, 1]");
  expect_rejected({"--offload-fraction=-0.1"}, "[0, 1]");
  expect_rejected({"--offload-fraction=nan"}, "[0, 1]");
}

TEST(Cli, RejectsUnknownModelAndVariant) {
  expect_rejected({"--model=gpt5"}, "unknown model; known: dsv4-flash");
  expect_rejected({"--variant=upstream,nope"}, "unknown variant 'nope'");
}

TEST(Cli, RejectsImpossibleWorlds) {
  expect_rejected({"--ep=3", "--dp=4"}, "expert-parallel size 3 must divide the data-parallel size 4");
  expect_rejected({"--pp=8", "--vpp=8"}, "pp * vpp = 64 exceeds the 43 decoder layers");
  expect_rejected({"--model=mixed-dtype-net", "--pp=2", "--vpp=1", "--ep=1"},
                  "pp * vpp = 2 exceeds the 1 decoder layers");
}

TEST(Cli, RejectsMalformedArguments) {
  expect_rejected({"--dp=4x"}, "--dp=4x");
  expect_rejected({"--seed=-1"}, "expected a decimal seed");
  expect_rejected({"--frobnicate=1"}, "unknown option '--frobnicate'");
  expect_rejected({"dp=4"}, "unknown argument 'dp=4'");
  expect_rejected({"--scale=0"}, "expected a positive integer");
}

TEST(Cli, SeedAcceptsACommitHash) {
  auto parsed = parse_cli({"--seed=0123456789abcdef0123456789abcdef00000000000000ff"});
  ASSERT_TRUE(std::holds_alternative<std::string>(parsed));  // 48 hex digits: not a hash
  parsed = parse_cli({"--seed=0123456789abcdef01234567000000000000002a"});
  ASSERT_TRUE(std::holds_alternative<CliOptions>(parsed));
  EXPECT_EQ(std::get<CliOptions>(parsed).seed, 42u);
}

TEST(Cli, MixedDtypeNetShowsTheSeedDefectOnlyUpstream) {
  const CliRun r = run({"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1", "--dp=2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("SEED=0 model=mixed-dtype-net", 0), 0u) << r.out;
  // alpha [16, 32] (512 elements) sits alone in the fp32 buffer: both dp ranks own a piece.
  EXPECT_NE(r.out.find("upstream: 2 of 2 ranks fail construction"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pr6982: 0 of 2 ranks fail construction"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ValueError: can't optimize a non-leaf Tensor (first: alpha)"),
            std::string::npos);
}

TEST(Cli, JsonHasOneObjectPerRankAndVariant) {
  const CliRun r = run({"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1", "--dp=3", "--json",
                     "--offload=off"});
  ASSERT_EQ(r.status, 0) << r.err;
  size_t count = 0;
  for (size_t at = r.out.find("\"variant\""); at != std::string::npos;
       at = r.out.find("\"variant\"", at + 1)) {
    ++count;
  }
  EXPECT_EQ(count, 6u);
  EXPECT_EQ(r.out.find("\"ok\": false"), std::string::npos);  // no rebuild, no failure
}

std::vector<std::string> json_values(const std::string& json, const std::string& key) {
  std::vector<std::string> out;
  const std::string needle = "\"" + key + "\": ";
  for (size_t at = json.find(needle); at != std::string::npos; at = json.find(needle, at + 1)) {
    const size_t start = at + needle.size();
    out.push_back(json.substr(start, json.find_first_of(",}", start) - start));
  }
  return out;
}

TEST(Cli, StepsShowFindingF1OnPr6982AndNothingOnTheFix) {
  // Offload fraction 0 keeps alpha's fp32 shard on the accelerator: pr6982 never updates it.
  const CliRun r = run({"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1", "--dp=2",
                        "--offload-fraction=0", "--variant=pr6982,hdo-reload", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto diffs = json_values(r.out, "max_diff");
  ASSERT_EQ(diffs.size(), 4u);
  EXPECT_NE(diffs[0], "0");  // pr6982, rank 0
  EXPECT_EQ(diffs[2], "0");  // hdo-reload, rank 0
  EXPECT_EQ(diffs[3], "0");
}

TEST(Cli, LayoutOnlyBytesEqualWhatThePortAllocates) {
  // The model's byte accounting (layout-only) against the port's tensors at the same scale.
  for (const char* model : {"mixed-dtype-net", "dsv4-flash"}) {
    std::vector<std::string> base{std::string("--model=") + model, "--variant=pr6982",
                                  "--json", "--steps=0", "--scale=256", "--offload-fraction=0.5"};
    if (std::string(model) == "mixed-dtype-net") {
      base.insert(base.end(), {"--pp=1", "--vpp=1", "--ep=1", "--dp=3"});
    }
    const CliRun tensors = run(base);
    base.push_back("--layout-only");
    const CliRun layout = run(base);
    ASSERT_EQ(tensors.status, 0) << tensors.err;
    ASSERT_EQ(layout.status, 0) << layout.err;
    EXPECT_EQ(json_values(tensors.out, "accel_bytes"), json_values(layout.out, "accel_bytes"))
        << model;
    EXPECT_EQ(json_values(tensors.out, "host_bytes"), json_values(layout.out, "host_bytes"))
        << model;
    EXPECT_EQ(json_values(tensors.out, "pieces"), json_values(layout.out, "pieces")) << model;
  }
}

TEST(Cli, LayoutOnlyPredictsTheFailingRanksThePortFinds) {
  std::vector<std::string> args{"--variant=upstream", "--json", "--steps=0", "--scale=256"};
  const CliRun tensors = run(args);
  args.push_back("--layout-only");
  const CliRun layout = run(args);
  EXPECT_EQ(json_values(tensors.out, "ok"), json_values(layout.out, "ok"));
}

TEST(Cli, TheSameSeedTwiceGivesIdenticalDigestsAndTheDigestSeesTheSeed) {
  const std::vector<std::string> base{"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1",
                                      "--dp=2", "--offload-fraction=0.5", "--variant=hdo-load-alias"};
  std::vector<std::string> args = base;
  args.push_back("--check-determinism");
  const CliRun r = run(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("determinism: two runs, identical digests"), std::string::npos) << r.out;
  // The digest is not blind: another seed changes it.
  auto digest_line = [](const CliRun& x) { return x.out.substr(x.out.find("determinism:")); };
  args.push_back("--seed=7");
  const CliRun other = run(args);
  ASSERT_EQ(other.status, 0) << other.err;
  EXPECT_NE(digest_line(r), digest_line(other));
}

TEST(Cli, RejectsBadSteps) { expect_rejected({"--steps=-1"}, "expected an integer from 0 to 100"); }

}  // namespace
}  // namespace sc::sim
