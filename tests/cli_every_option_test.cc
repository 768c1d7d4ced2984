// Every option of every binary (sim/input/args.h), taken from the binary's own `--help`: each
// value option gives the same exit status and output as `--opt value` and as `--opt=value`, each
// bad value (the forms by turns) exits 2 with a message naming the option, and each flag works alone and refuses a
// value. An option that `--help` shows and no case here covers fails the test. The binaries whose
// options GoogleTest and Google Benchmark parse run each flag of their tables in both forms.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim/input/args.h"
#include "tests/support/command.h"

// A namespace of its own: the unity build joins this file with cli_convention_test.cc.
namespace every_option {
namespace {

using sc::testing::CommandResult;

// A value option: a good value and its run's exit status, bad values, and the other arguments.
struct ValueCase {
  std::string name;  // without the dashes
  std::string context;
  std::string good;
  int status = 0;
  std::vector<std::string> bad;
  bool same_output = true;  // false where the output names ports, pids or the arguments
};

// A flag, the other arguments of its run and that run's exit status.
struct FlagCase {
  std::string name;
  std::string context;
  int status = 0;
};

// Runs `command` (stderr joined to stdout).
CommandResult run(const std::string& command) {
  return sc::testing::run_command(command + " 2>&1");
}

// `text` without what differs from run to run: RapidCheck's random seed line, decimals (times).
std::string steady(const std::string& text) {
  static const std::regex kSeedLine("Using configuration: seed=[0-9]+\n");
  static const std::regex kDecimal("[0-9]+\\.[0-9]+");
  return std::regex_replace(std::regex_replace(text, kSeedLine, ""), kDecimal, "#");
}

// `text` quoted for the shell.
std::string quoted(const std::string& text) { return "'" + text + "'"; }

// The option names of `exe`'s `--help`: the leading `--name` words of its option lines.
std::set<std::string> help_options(const std::string& exe) {
  const CommandResult help = run(exe + " --help");
  EXPECT_EQ(help.status, 0) << help.output;
  std::set<std::string> names;
  std::istringstream lines(help.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  --", 0) != 0) continue;
    std::istringstream words(line);
    for (std::string word; words >> word && word.rfind("--", 0) == 0;) {
      names.insert(word.substr(2, word.find('=') - 2));
    }
  }
  return names;
}

void expect_value_option(const std::string& exe, const ValueCase& c) {
  const std::string prefix = exe + " " + c.context + " --" + c.name;
  const CommandResult joined = run(prefix + "=" + quoted(c.good));
  const CommandResult spaced = run(prefix + " " + quoted(c.good));
  EXPECT_EQ(joined.status, c.status) << prefix << "=" << c.good << "\n" << joined.output;
  EXPECT_EQ(spaced.status, c.status) << prefix << " " << c.good << "\n" << spaced.output;
  if (c.same_output) {
    EXPECT_EQ(steady(joined.output), steady(spaced.output)) << prefix;
  }
  // Bad values in both forms by turns: the handler sees the value the same way after either.
  for (size_t i = 0; i < c.bad.size(); ++i) {
    const char* form = i % 2 == 0 ? " " : "=";
    const CommandResult r = run(prefix + form + quoted(c.bad[i]));
    // The message is the first line; a usage text may follow it.
    const std::string message = r.output.substr(0, r.output.find('\n'));
    EXPECT_EQ(r.status, 2) << prefix << form << c.bad[i] << "\n" << r.output;
    EXPECT_NE(message.find("--" + c.name), std::string::npos) << prefix << form << c.bad[i]
                                                              << "\n" << r.output;
  }
}

void expect_flag(const std::string& exe, const FlagCase& c) {
  const std::string command = exe + " " + c.context + " --" + c.name;
  const CommandResult alone = run(command);
  EXPECT_EQ(alone.status, c.status) << command << "\n" << alone.output;
  const CommandResult valued = run(command + "=1");
  EXPECT_EQ(valued.status, 2) << command << "=1\n" << valued.output;
  EXPECT_NE(valued.output.find("--" + c.name + " takes no value"), std::string::npos)
      << valued.output;
}

// Checks that `values` and `flags` cover `exe`'s options exactly, then runs every case.
void expect_every_option(const std::string& exe, const std::vector<ValueCase>& values,
                         const std::vector<FlagCase>& flags) {
  std::set<std::string> covered;
  for (const ValueCase& c : values) covered.insert(c.name);
  for (const FlagCase& c : flags) covered.insert(c.name);
  EXPECT_EQ(help_options(exe), covered) << exe << ": an option without a case here, or a case "
                                        << "of an option --help does not show";
  for (const ValueCase& c : values) expect_value_option(exe, c);
  for (const FlagCase& c : flags) expect_flag(exe, c);
}

const std::string kSource = SC_SOURCE_DIR;
// A world the reference model lays out in a blink.
const std::string kSmall = "--layout-only --model=mixed-dtype-net --pp=1 --vpp=1 --ep=1 --dp=2";
// The same world with tensors, one step, one variant.
const std::string kTensors = "--model=mixed-dtype-net --pp=1 --vpp=1 --ep=1 --dp=2 --steps=1 "
                             "--variant=pr6982";

TEST(CliEveryOption, ShardcheckSim) {
  const std::string dir = ::testing::TempDir();
  const std::string llama = "--layout-only --model=llama --pp=2 --vpp=1 --ep=1 --dp=1";
  const std::string no_model = "--layout-only --pp=1 --vpp=1 --ep=1 --dp=2";
  expect_every_option(
      SC_SIM_EXE,
      {{"model", no_model, "mixed-dtype-net", 0, {"gpt5"}},
       {"model-file", no_model, kSource + "/models/tiny-moe.json", 0, {"", "/no/such.json"}},
       {"variant", kSmall, "upstream", 0, {"nope"}},
       {"pp", kSmall, "1", 0, {"0", "x"}},
       {"vpp", kSmall, "1", 0, {"0"}},
       {"ep", kSmall, "1", 0, {"65537"}},
       {"dp", kSmall, "2", 0, {"2x"}},
       {"tp", kSmall, "1", 0, {"-1"}},
       {"pipeline-layout", kSmall, "none", 0, {"", "Q"}},
       {"first-stage-layers", llama, "15", 0, {"0"}},
       {"last-stage-layers", llama, "15", 0, {"x"}},
       {"offload", kSmall, "off", 0, {"maybe"}},
       {"offload-fraction", kSmall, "0.5", 0, {"1.5", "nan"}},
       {"bucket-size", kSmall, "4000", 0, {"0", "many"}},
       {"precision-aware", kSmall, "off", 0, {"2"}},
       {"device", kSmall, "cpu", 0, {"tpu"}},
       {"seed", kSmall, "0123456789abcdef01234567000000000000002a", 0, {"-1"}},
       {"scale", kSmall, "2", 0, {"0"}},
       {"steps", kSmall, "1", 0, {"101"}},
       {"memory-budget", kSmall, "8GiB", 0, {"lots", "0"}},
       {"svg", kSmall, dir + "/every_option.svg", 0, {""}},
       {"html", kSmall, dir + "/every_option.html", 0, {""}},
       {"processes", kTensors, "2", 0, {"0", "1025"}, false},
       {"collective-timeout", kSmall, "30", 0, {"0"}},
       {"launch-timeout", kSmall, "30", 0, {"86401"}},
       {"fault", kTensors + " --processes=2", "drop-grads", 1, {"nope", "exit@x"}, false}},
      {{"layout-only", kTensors, 0},
       {"check-determinism", kTensors, 0},
       {"json", kSmall, 0},
       {"stats", kSmall, 0},
       {"heat", kTensors + " --dp=1 --svg=" + dir + "/every_option_heat.svg", 0},
       // One rank of a world started elsewhere: without RANK and the rest, bad input.
       {"multi-process", kTensors, 2}});
}

TEST(CliEveryOption, ShardcheckMutants) {
  // MEG-03 dies in its first case.
  const std::string one = "--only=MEG-03 --max-success=5";
  expect_every_option(SC_MUTANTS_EXE,
                      {{"only", "--max-success=5", "MEG-03", 0, {"NO-SUCH-MUTANT"}},
                       {"max-success", "--only=MEG-03", "5", 0, {"0", "x"}},
                       {"seed", one, "2", 0, {"-1", "18446744073709551616"}}},
                      {{"json", one, 0}});
}

TEST(CliEveryOption, ShardcheckReplay) {
  const std::string seed_case = kSource + "/cases/seed_nonleaf_fp32_shard.json";
  expect_every_option(
      SC_REPLAY_EXE,
      {{"variant", seed_case, "upstream", 1, {"no-such-variant"}},
       {"property", seed_case, "ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank",
        1, {"No.Such"}}},
      {});
}

TEST(CliEveryOption, ShardcheckVerify) {
  // No Megatron tree here: a folder without megatron/core, refused by the worker in either form.
  // The report's options are run with an --only that names no property, refused before the
  // worker starts (each start costs seconds).
  const std::string tree = "--tree=" + kSource + "/docs";
  const std::string refused = tree + " --only=No.Such";
  const std::string review = refused + " --after-tree=" + kSource + "/docs --fix=fix.patch" +
                             " --regressions=" + kSource + "/tests/regressions";
  expect_every_option(SC_VERIFY_EXE,
                      {{"tree", "", kSource + "/docs", 2, {"/no/such/tree"}},
                       {"only", tree, "ShardBuilderDiff.PortRangesEqualModelOnEveryRank", 2,
                        {"No.Such"}},
                       {"name", refused, "seed", 2, {}},
                       {"commit", refused, "d8b71082", 2, {}},
                       {"patch", refused, "pr6982.patch", 2, {}},
                       {"replay", refused, "scripts/verify-megatron", 2, {}},
                       {"case-replay", refused, "scripts/verify-megatron --case", 2, {}},
                       {"run-dir", refused, "verify-run", 2, {}},
                       {"after-tree", refused + " --fix=fix.patch", kSource + "/docs", 2, {}},
                       {"fix", refused + " --after-tree=" + kSource + "/docs", "fix.patch", 2,
                        {}},
                       {"after-replay", refused, "scripts/verify-megatron", 2, {}},
                       {"left-out", refused, "F3: why", 2, {}},
                       {"fixes", review, "F3", 2, {"X3", "F"}},
                       {"regressions", refused, kSource + "/tests/regressions", 2, {}},
                       {"claim-failed", refused, "F3: why", 2, {}},
                       {"real-ranks", refused, "pr6982", 2, {"nope"}},
                       {"real-ranks-cases", refused + " --real-ranks=pr6982", "3", 2, {"0", "x"}},
                       {"junit", refused, ::testing::TempDir() + "/every_option.xml", 2, {}},
                       {"control-tree", refused, kSource + "/docs", 2, {}}},
                      {{"json", refused, 2}});
}

// Runs each of `flags` with its value from `values` in both forms after `context`; the same
// status (0) and output either way.
void expect_both_forms(const std::string& exe, const std::string& context,
                       const std::set<std::string>& flags,
                       const std::map<std::string, std::string>& values) {
  for (const std::string& flag : flags) {
    ASSERT_TRUE(values.count(flag)) << flag << " has no case here";
    const std::string prefix = exe + " " + context + " " + flag;
    const CommandResult joined = run(prefix + "=" + quoted(values.at(flag)));
    const CommandResult spaced = run(prefix + " " + quoted(values.at(flag)));
    EXPECT_EQ(joined.status, 0) << prefix << "\n" << joined.output;
    EXPECT_EQ(spaced.status, 0) << prefix << "\n" << spaced.output;
    EXPECT_EQ(steady(joined.output), steady(spaced.output)) << prefix;
  }
}

TEST(CliEveryOption, ShardcheckProperties) {
  const std::string flagfile = ::testing::TempDir() + "/every_option.flags";
  std::ofstream(flagfile) << "--gtest_filter=ShardBuilderModel.*\n";
  expect_both_forms(SC_PROPERTIES_EXE, "--gtest_list_tests --gtest_filter=ShardBuilderModel.*",
                    sc::input::kGoogleTestValueFlags,
                    {{"--gtest_filter", "ShardBuilderModel.*"},
                     {"--gtest_repeat", "1"},
                     {"--gtest_output", "json:" + ::testing::TempDir() + "/every_option.json"},
                     {"--gtest_random_seed", "7"},
                     {"--gtest_color", "no"},
                     {"--gtest_stack_trace_depth", "5"},
                     {"--gtest_flagfile", flagfile}});
}

#ifdef SC_BENCH_EXE
TEST(CliEveryOption, ShardcheckBench) {
  expect_both_forms(SC_BENCH_EXE, "--benchmark_list_tests --benchmark_filter=BM_Limit_HostTriad",
                    sc::input::kGoogleBenchmarkValueFlags,
                    {{"--benchmark_filter", "BM_Limit_HostTriad"},
                     {"--benchmark_min_time", "0.01"},
                     {"--benchmark_repetitions", "1"},
                     {"--benchmark_format", "console"},
                     {"--benchmark_out", ::testing::TempDir() + "/every_option_bench.json"},
                     {"--benchmark_out_format", "json"},
                     {"--benchmark_color", "false"},
                     {"--benchmark_time_unit", "ms"},
                     {"--benchmark_context", "case=every_option"},
                     {"--benchmark_perf_counters", ""},
                     {"--v", "0"}});
}
#endif

}  // namespace
}  // namespace every_option
