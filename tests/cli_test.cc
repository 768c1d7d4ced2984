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

}  // namespace
}  // namespace sc::sim
