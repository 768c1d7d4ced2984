// One command-line convention for every binary (sim/input/args.h): `--help` prints the usage
// and exits 0; `--opt=value` and `--opt value` both work; bad input exits 2, a failed check 1.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "sim/input/args.h"
#include "tests/support/command.h"

namespace {

using Outcome = sc::testing::CommandResult;

// Runs `command` (stderr joined to stdout) and returns its exit status and output.
Outcome run(const std::string& command) { return sc::testing::run_command(command + " 2>&1"); }

const std::string kSeedCase = std::string(SC_SOURCE_DIR) + "/cases/seed_nonleaf_fp32_shard.json";

TEST(CliConvention, SplitArgsJoinsBothFormsAndNamesTheBadArgument) {
  using sc::input::Arg;
  using sc::input::split_args;
  auto both = split_args({"--a=1", "--a", "2", "-h", "file", "--f"}, {"a"}, {"f"});
  ASSERT_TRUE(std::holds_alternative<std::vector<Arg>>(both));
  const auto& args = std::get<std::vector<Arg>>(both);
  ASSERT_EQ(args.size(), 5u);
  EXPECT_EQ(args[0].name + "=" + args[0].value, "a=1");
  EXPECT_EQ(args[1].name + "=" + args[1].value, "a=2");
  EXPECT_EQ(args[2].name, "help");
  EXPECT_TRUE(args[3].positional());
  EXPECT_EQ(args[3].value, "file");
  EXPECT_EQ(args[4].name, "f");
  EXPECT_EQ(std::get<std::string>(split_args({"--b=1"}, {"a"}, {})), "unknown option '--b'");
  EXPECT_EQ(std::get<std::string>(split_args({"--a"}, {"a"}, {})),
            "--a needs a value (--a=VALUE or --a VALUE)");
  EXPECT_EQ(std::get<std::string>(split_args({"--f=1"}, {}, {"f"})), "--f takes no value");
  EXPECT_EQ(std::get<std::string>(split_args({"-x"}, {}, {})), "unknown argument '-x'");
}

TEST(CliConvention, ShardcheckSim) {
  const std::string exe = SC_SIM_EXE;
  const Outcome help = run(exe + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("usage"), std::string::npos) << help.output;
  const std::string world = " --layout-only --model=mixed-dtype-net --pp=1 --vpp=1 --ep=1";
  EXPECT_EQ(run(exe + world + " --dp=2").status, 0);
  EXPECT_EQ(run(exe + world + " --dp 2").status, 0);
  EXPECT_EQ(run(exe + " --no-such-option").status, 2);
  EXPECT_EQ(run(exe + " --dp").status, 2);
}

TEST(CliConvention, ShardcheckReplay) {
  const std::string exe = SC_REPLAY_EXE;
  const Outcome help = run(exe + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("usage"), std::string::npos) << help.output;
  EXPECT_EQ(run(exe + " " + kSeedCase + " --variant=upstream").status, 1);
  EXPECT_EQ(run(exe + " " + kSeedCase + " --variant upstream").status, 1);
  EXPECT_EQ(run(exe + " " + kSeedCase + " --variant pr6982").status, 0);
  EXPECT_EQ(run(exe + " " + kSeedCase + " --variant").status, 2);
  EXPECT_EQ(run(exe + " " + kSeedCase + " --no-such-option=1").status, 2);
  EXPECT_EQ(run(exe + " " + kSeedCase + " --variant=no-such-variant").status, 2);
}

TEST(CliConvention, ShardcheckVerify) {
  const std::string exe = SC_VERIFY_EXE;
  const Outcome help = run(exe + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("usage"), std::string::npos) << help.output;
  EXPECT_EQ(run(exe).status, 2);  // no --tree
  EXPECT_EQ(run(exe + " --tree").status, 2);
  EXPECT_EQ(run(exe + " --tree /no/such/tree --only NoSuch.Property").status, 2);
  // A folder that is no Megatron tree: the worker refuses it, in either form of --tree.
  EXPECT_EQ(run(exe + " --tree=" + std::string(SC_SOURCE_DIR) + "/docs").status, 2);
  EXPECT_EQ(run(exe + " --tree " + std::string(SC_SOURCE_DIR) + "/docs").status, 2);
  EXPECT_EQ(run(exe + " --tree /x stray").status, 2);
}

TEST(CliConvention, ShardcheckMutants) {
  const std::string exe = SC_MUTANTS_EXE;
  const Outcome help = run(exe + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("usage"), std::string::npos) << help.output;
  // MEG-03 dies in its first case.
  EXPECT_EQ(run(exe + " --only=MEG-03 --max-success=5").status, 0);
  EXPECT_EQ(run(exe + " --only MEG-03 --max-success 5 --seed 2").status, 0);
  EXPECT_EQ(run(exe + " --only").status, 2);
  EXPECT_EQ(run(exe + " --max-success=0").status, 2);
  EXPECT_EQ(run(exe + " --only=NO-SUCH-MUTANT").status, 2);
  EXPECT_EQ(run(exe + " stray").status, 2);
}

TEST(CliConvention, ShardcheckProperties) {
  const std::string exe = SC_PROPERTIES_EXE;
  const Outcome help = run(exe + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("gtest_filter"), std::string::npos) << help.output;
  const Outcome listed = run(exe + " --gtest_list_tests --gtest_filter ShardBuilderModel.*");
  EXPECT_EQ(listed.status, 0);
  EXPECT_NE(listed.output.find("LayoutFollowsAlignmentOrderAndBucketRules"), std::string::npos)
      << listed.output;
  EXPECT_EQ(listed.output.find("HybridOptimizerDiff"), std::string::npos) << listed.output;
  EXPECT_EQ(run(exe + " --gtest_list_tests --gtest_filter=ShardBuilderModel.*").output,
            listed.output);
}

#ifdef SC_BENCH_EXE
TEST(CliConvention, ShardcheckBench) {
  const std::string exe = SC_BENCH_EXE;
  const Outcome help = run(exe + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.output.find("benchmark_filter"), std::string::npos) << help.output;
  const Outcome listed = run(exe + " --benchmark_list_tests --benchmark_filter BM_Limit_HostTriad");
  EXPECT_EQ(listed.status, 0);
  EXPECT_NE(listed.output.find("BM_Limit_HostTriad"), std::string::npos) << listed.output;
  EXPECT_EQ(run(exe + " --benchmark_list_tests --benchmark_filter=BM_Limit_HostTriad").output, listed.output);
  EXPECT_EQ(run(exe + " --no-such-option").status, 2);
}
#endif

}  // namespace
