// Case files: writing then reading gives the same case (generated cases and schedules); a
// malformed file is refused with the field named; shardcheck-replay fails the seed case under
// upstream (exit 1), passes it on the fully patched variant (exit 0) and exits 2 on bad input;
// and a failing property writes a case file that replays to the same failure.
#include "properties/case_file.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "properties/case_extras.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/step_gen.h"
#include "properties/hybrid_state.h"
#include "properties/registry.h"
#include "properties/run.h"
#include "sim/port/deviation.h"
#include "tests/support/command.h"

namespace sc::props {
namespace {

const std::string kSeedCase = std::string(SC_SOURCE_DIR) + "/cases/seed_nonleaf_fp32_shard.json";

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Exit status of shardcheck-replay with `args`.
int replay(const std::string& args) {
  const std::string cmd = std::string(SC_REPLAY_EXE) + " " + args + " > /dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The exit status shardcheck-replay would give for `file` on `variant`, computed in this process
// (the corpus tests replay dozens of cases; the binary itself is tested by CaseFileReplay.*).
int replay_here(const std::string& file, const std::string& variant) {
  const CaseFile f = parse_case_file(read(file));
  const Property* p = find_property(f.property);
  const auto b = sut::behaviour_by_name(variant);
  if (p == nullptr || !p->check || !b) return 2;
  RunOptions once;
  once.max_success = 1;
  once.shrink = false;
  const RunOutcome r = run_property([&] { p->check(f.inputs, *b); }, once);
  return r.failed() ? 1 : r.kind == RunOutcome::Kind::kGaveUp ? 2 : 0;
}

// Runs `body` as `cases` RapidCheck cases at `seed`; fails the test on a failing case.
template <typename Body>
void for_cases(uint64_t seed, int cases, Body body) {
  RunOptions options;
  options.seed = seed;
  options.max_success = cases;
  const RunOutcome r = run_property(body, options);
  ASSERT_FALSE(r.failed()) << r.description;
}

// Counterexamples print every drawn value by its fields: the loss scaler's configuration printed
// as RapidCheck's `<???>` until it had a printer of its own.
TEST(CaseFile, CounterexamplesPrintTheScalerConfigByItsFields) {
  model::GradScalerConfig c;
  c.dynamic = false;
  c.initial_scale = 128.0f;
  c.hysteresis = 3;
  EXPECT_EQ(rc::toString(c),
            "GradScalerConfig{constant initial_scale=128 min_scale=1 growth_factor=2 "
            "backoff_factor=0.5 growth_interval=1000 hysteresis=3}");
}

// A failure of the command-sequence property names the Step it follows by its number in the
// sequence: F3's case (Step, ReloadModelParams, Step) fails at the second Step once F3's fix is
// taken out; "after Step" alone did not say which.
TEST(CaseFile, AStateFailureNamesItsStepByNumber) {
  const std::string file =
      std::string(SC_SOURCE_DIR) + "/tests/regressions/f3_hdo_reload_keeps_stale_host_copies.json";
  const auto r = testing::run_command(std::string(SC_REPLAY_EXE) + " " + file +
                                      " --variant=patched-F3 2>&1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("variant patched-F3: after Step 2, p1 element 0 of its piece: port "),
            std::string::npos)
      << r.output;
}

TEST(CaseFile, GeneratedCasesRoundTrip) {
  int checked = 0;
  for_cases(11, 300, [&] {
    CaseFile f;
    f.property = "HybridOptimizerDiff.OffloadFractionDoesNotChangeTheResult";
    f.variant = "pr6982";
    f.inputs.c = *gen::case_spec();
    f.inputs.schedule = *gen::schedule(f.inputs.c, 8);
    f.inputs.split = *rc::gen::inRange<size_t>(0, f.inputs.schedule.steps.size() + 1);
    f.inputs.other_fraction = *rc::gen::inRange(0, 1001) / 1000.0;
    f.extras = {"split", "other_fraction"};
    const std::string text = to_json(f);
    const CaseFile back = parse_case_file(text);
    RC_ASSERT(back.property == f.property);
    RC_ASSERT(back.variant == f.variant);
    RC_ASSERT(same_inputs(back.inputs, f.inputs));
    RC_ASSERT(to_json(back) == text);
    ++checked;
  });
  EXPECT_EQ(checked, 300);
}

TEST(CaseFile, StatefulCasesRoundTripWithTheirCommands) {
  int with_commands = 0;
  for_cases(12, 100, [&] {
    CaseFile f;
    f.property = "HybridOptimizerState.CommandSequencesMatchTheReference";
    f.variant = "hdo-reload";
    f.inputs = draw_hybrid_state_case();
    f.extras = find_property(f.property)->extras;
    const std::string text = to_json(f);
    const CaseFile back = parse_case_file(text);
    RC_ASSERT(same_inputs(back.inputs, f.inputs));
    RC_ASSERT(to_json(back) == text);
    if (f.inputs.commands.empty()) return;
    ++with_commands;
    CaseInputs other = f.inputs;
    StateCommand& last = other.commands.back();
    if (std::holds_alternative<state_cmd::SaveState>(last)) {
      last = state_cmd::ReloadModelParams{};
    } else {
      last = state_cmd::SaveState{};
    }
    RC_ASSERT(!same_inputs(other, f.inputs));
    other = f.inputs;
    other.rank = other.rank + 1;
    RC_ASSERT(!same_inputs(other, f.inputs));
  });
  EXPECT_GT(with_commands, 50);
}

TEST(CaseFile, SameInputsSeesEveryField) {
  CaseFile f = parse_case_file(read(kSeedCase));
  const CaseInputs base = f.inputs;
  ASSERT_TRUE(same_inputs(base, f.inputs));
  f.inputs.c.overlap_cpu_optimizer_d2h_h2d = false;
  EXPECT_FALSE(same_inputs(base, f.inputs));
  f.inputs = base;
  f.inputs.c.params[0].shape = {1, 1};
  EXPECT_FALSE(same_inputs(base, f.inputs));
  f.inputs = base;
  f.inputs.other_fraction = 0.5;
  EXPECT_FALSE(same_inputs(base, f.inputs));
  f.inputs = base;
  f.inputs.map_location = "cpu";
  EXPECT_FALSE(same_inputs(base, f.inputs));
}

// The extras `in` holds away from their defaults.
std::set<std::string> set_extras(const CaseInputs& in) {
  std::set<std::string> out;
  for (const CaseExtra& e : case_extras()) {
    if (!e.same(in, CaseInputs{})) out.insert(e.key);
  }
  return out;
}

// The extras `p`'s draw sets over `cases` draws that `p` does not name: its case files would lose
// them, and their replay would not be the failure.
std::set<std::string> unnamed_extras(const Property& p, int cases) {
  std::set<std::string> drawn;
  for_cases(21, cases, [&] {
    for (const std::string& key : set_extras(p.draw())) drawn.insert(key);
  });
  for (const std::string& key : p.extras) drawn.erase(key);
  return drawn;
}

// Each replayable property names the extras its draw sets (Property::extras), each a known one,
// so that its case files hold its whole draw; every extra is some property's.
TEST(CaseExtras, EachReplayablePropertyNamesTheExtrasItDraws) {
  std::set<std::string> named;
  for (const Property& p : all_properties()) {
    if (!p.draw) continue;
    EXPECT_EQ(unnamed_extras(p, 30), std::set<std::string>{}) << p.name;
    for (const std::string& key : p.extras) {
      EXPECT_NE(find_case_extra(key), nullptr) << p.name << ": " << key;
      named.insert(key);
    }
  }
  for (const CaseExtra& e : case_extras()) EXPECT_TRUE(named.count(e.key)) << e.key;
}

// The check above catches a property whose registration forgets an extra it draws.
TEST(CaseExtras, APropertyThatForgetsAnExtraItDrawsIsCaught) {
  Property p = *find_property("HybridOptimizerDiff.LoadedStateLivesOnItsSubOptimizersDevice");
  ASSERT_EQ(p.extras, (std::vector<std::string>{"split", "map_location"}));
  p.extras = {"split"};
  EXPECT_EQ(unnamed_extras(p, 30), std::set<std::string>{"map_location"});
}

// A recorded case file holds its property's extras and no other; an old file's extras, whatever
// its property, read back and are written again.
TEST(CaseExtras, ACaseFileHoldsItsPropertysExtras) {
  CaseFile f = parse_case_file(read(kSeedCase));
  EXPECT_EQ(f.extras, (std::vector<std::string>{"split", "other_fraction"}));
  EXPECT_NE(to_json(f).find("\"other_fraction\""), std::string::npos);
  f.extras = find_property(f.property)->extras;
  EXPECT_TRUE(f.extras.empty()) << f.property;
  const std::string text = to_json(f);
  EXPECT_EQ(text.find("\"split\""), std::string::npos) << text;
  EXPECT_EQ(text.find("\"other_fraction\""), std::string::npos) << text;
  EXPECT_TRUE(same_inputs(parse_case_file(text).inputs, f.inputs));
}

TEST(CaseFile, TheSeedCaseIsTheSeedDefectsMinimalCase) {
  const CaseFile f = parse_case_file(read(kSeedCase));
  EXPECT_EQ(f.variant, "upstream");
  ASSERT_EQ(f.inputs.c.params.size(), 1u);
  EXPECT_EQ(f.inputs.c.params[0].dtype, model::DType::kFloat32);
  EXPECT_EQ(f.inputs.c.params[0].numel(), 1);
  EXPECT_TRUE(f.inputs.c.cpu_offload);
  EXPECT_EQ(f.inputs.c.dp, 1);
}

// The error of parsing `text` with `from` replaced by `to`.
std::string error_in(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  try {
    parse_case_file(text);
  } catch (const CaseFileError& e) {
    return e.what();
  }
  return "(accepted)";
}

// The error of parsing the seed case with `from` replaced by `to`.
std::string error_after(const std::string& from, const std::string& to) {
  return error_in(read(kSeedCase), from, to);
}

TEST(CaseFile, MalformedFilesNameTheField) {
  EXPECT_NE(error_after("\"fp32\"", "\"bf17\"").find("case.params[0].dtype: unknown dtype"),
            std::string::npos);
  EXPECT_NE(error_after("\"dp\": 1", "\"dp\": 0").find("case.dp: 0 is outside"),
            std::string::npos);
  EXPECT_NE(error_after("\"dp\": 1", "\"dq\": 1").find("missing key \"dp\""), std::string::npos);
  EXPECT_NE(error_after("\"split\": 0", "\"split\": 0, \"seed\": 3").find("seed: unknown key"),
            std::string::npos);
  EXPECT_NE(error_after("\"cpu_offload\": true", "\"cpu_offload\": 1")
                .find("case.cpu_offload: expected true or false"),
            std::string::npos);
  EXPECT_NE(error_after("\"offload_fraction\": 1.0", "\"offload_fraction\": 1.5")
                .find("case.offload_fraction: must lie in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_after("\"shape\": [1]", "\"shape\": [0]").find("zero elements"),
            std::string::npos);
  EXPECT_NE(error_after("\"schedule\": []",
                        "\"schedule\": [{\"grad_seed\": 1, \"kinds\": \"OO\", \"hyper\": []}]")
                .find("schedule[0].kinds: one letter per parameter"),
            std::string::npos);
  EXPECT_NE(error_after("{", "[").find("not JSON"), std::string::npos);
}

TEST(CaseFile, MapLocationRoundTripsAndOnlyCpuIsKnown) {
  CaseFile f = parse_case_file(read(kSeedCase));
  f.extras.push_back("map_location");
  EXPECT_EQ(to_json(f).find("map_location"), std::string::npos);  // absent: where saved
  f.inputs.map_location = "cpu";
  const std::string text = to_json(f);
  EXPECT_TRUE(same_inputs(parse_case_file(text).inputs, f.inputs));
  EXPECT_NE(error_in(text, "\"map_location\": \"cpu\"", "\"map_location\": \"cuda\"")
                .find("map_location: unknown map location \"cuda\""),
            std::string::npos);
}

// A case that failed against real code names its tree, commit and patches; shardcheck-replay
// refuses to run it on the port unless told to (it would replay the port, not that tree).
TEST(CaseFile, ARealCodeCaseNamesItsTreeAndIsNotReplayedOnThePort) {
  CaseFile f = parse_case_file(read(kSeedCase));
  f.megatron = RealCodeSource{"megatron-lm-d8b71082.tar.gz", "d8b71082", {"/p/pr6982.patch"}};
  const std::string text = to_json(f);
  const CaseFile back = parse_case_file(text);
  ASSERT_TRUE(back.megatron);
  EXPECT_EQ(back.megatron->tree, "megatron-lm-d8b71082.tar.gz");
  EXPECT_EQ(back.megatron->commit, "d8b71082");
  EXPECT_EQ(back.megatron->patches, std::vector<std::string>{"/p/pr6982.patch"});
  EXPECT_NE(error_in(text, "\"commit\": \"d8b71082\"", "\"commit\": 1").find("megatron.commit"),
            std::string::npos);
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / "sc_case_file_test_real_code.json";
  std::ofstream(file) << text;
  EXPECT_EQ(replay(file.string()), 2);
  EXPECT_EQ(replay(file.string() + " --variant=upstream"), 1);
}

TEST(CaseFile, MalformedCommandsNameTheField) {
  const std::string f4 =
      read(std::string(SC_SOURCE_DIR) + "/tests/regressions/f4_hdo_load_reload_save_stale_master.json");
  auto error = [&](const std::string& from, const std::string& to) {
    return error_in(f4, from, to);
  };
  EXPECT_NE(error("\"ReloadModelParams\"", "\"Reload\"").find("commands[3].command: unknown command"),
            std::string::npos);
  EXPECT_NE(error("\"rank\": 0", "\"rank\": 1").find("rank: 1 is outside"), std::string::npos);
  EXPECT_NE(error("\"command\": \"SaveState\"", "\"command\": \"SaveState\", \"group\": 0")
                .find("commands[1].group: unknown key"),
            std::string::npos);
}

// Found by fuzz_case_file: a number beyond double's range made nlohmann-json throw out_of_range,
// which escaped parse_case_file as an unexpected exception instead of a CaseFileError.
TEST(CaseFile, ANumberOutOfRangeIsAMalformedFile) {
  for (const char* text : {"{\"property\": 1e400}", "{\"split\": -1e999}"}) {
    try {
      parse_case_file(text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const CaseFileError& e) {
      EXPECT_NE(std::string(e.what()).find("number overflow"), std::string::npos) << e.what();
    }
  }
}

TEST(CaseFileReplay, SeedCaseFailsOnUpstreamAndPassesWhenPatched) {
  EXPECT_EQ(replay(kSeedCase), 1);  // the file's variant: upstream
  EXPECT_EQ(replay(kSeedCase + " --variant=MEG-01"), 1);
  EXPECT_EQ(replay(kSeedCase + " --variant=pr6982"), 0);
  EXPECT_EQ(replay(kSeedCase + " --variant distopt-load-step"), 0);
  EXPECT_EQ(replay(kSeedCase +
                   " --variant=upstream"
                   " --property=ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing"),
            1);
}

// `shardcheck-sim replay FILE` is the same command through the simulator's binary.
TEST(CaseFileReplay, TheSimulatorHandsReplayOver) {
  auto sim = [](const std::string& args) {
    const std::string cmd = std::string(SC_SIM_EXE) + " replay " + args + " > /dev/null 2>&1";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  EXPECT_EQ(sim(kSeedCase), 1);
  EXPECT_EQ(sim(kSeedCase + " --variant=pr6982"), 0);
  EXPECT_EQ(sim("/nonexistent/case.json"), 2);
}

TEST(CaseFileReplay, BadInputExits2) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "sc_case_file_test";
  std::filesystem::create_directories(dir);
  const std::string bad = (dir / "bad.json").string();
  std::string text = read(kSeedCase);
  text.replace(text.find("\"fp32\""), 6, "\"bf17\"");
  std::ofstream(bad) << text;
  EXPECT_EQ(replay(bad), 2);
  EXPECT_EQ(replay((dir / "missing.json").string()), 2);
  EXPECT_EQ(replay(""), 2);
  EXPECT_EQ(replay(kSeedCase + " --variant=no-such-variant"), 2);
  EXPECT_EQ(replay(kSeedCase + " --property=No.Such"), 2);
  EXPECT_EQ(replay(kSeedCase + " --property=FusedAdamDiff.EveryTensorFollowsTheFusedOrderEmptyOnesIncluded"), 2);
  EXPECT_EQ(replay(kSeedCase + " --bogus"), 2);
}

TEST(CaseFileReplay, AFailingPropertyWritesACaseFileThatReplaysToTheFailure) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "sc_case_file_test" / "written";
  std::filesystem::remove_all(dir);
  ASSERT_EQ(setenv("SC_CASE_DIR", dir.c_str(), 1), 0);
  const std::string name = "ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank";
  const Property* p = find_property(name);
  ASSERT_NE(p, nullptr) << name;
  RunOptions options;
  options.seed = 1;
  options.max_success = 300;
  const RunOutcome failure = run_property([&] { p->body(sut::upstream()); }, options);
  unsetenv("SC_CASE_DIR");
  ASSERT_TRUE(failure.failed());
  const std::string file = (dir / (name + ".upstream.json")).string();
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  // The log of the shrunk case names the file and its replay; the JSON is in the file only.
  EXPECT_NE(failure.description.find("shardcheck-replay " + file), std::string::npos)
      << failure.description;
  const CaseFile f = parse_case_file(read(file));
  EXPECT_EQ(failure.description.find(to_json(f)), std::string::npos) << failure.description;
  EXPECT_FALSE(f.megatron) << "a port failure names no Megatron tree";
  EXPECT_EQ(f.inputs.c.params.size(), 1u);
  EXPECT_EQ(replay(file), 1);
  EXPECT_EQ(replay(file + " --variant=pr6982"), 0);
}

// The regression corpus: every shrunk case ever found, the seed's first (cases/*.json, then
// tests/regressions/*.json). Each still fails on the variant it was found on (its "variant"),
// so it still catches that bug, and holds on the fully patched variant.
TEST(RegressionCorpus, EveryCaseFailsOnItsVariantAndHoldsWhenFullyPatched) {
  std::vector<std::string> files;
  for (const char* dir : {"/cases", "/tests/regressions"}) {
    std::vector<std::string> here;
    for (const auto& e : std::filesystem::directory_iterator(std::string(SC_SOURCE_DIR) + dir)) {
      if (e.path().extension() == ".json") here.push_back(e.path().string());
    }
    std::sort(here.begin(), here.end());
    files.insert(files.end(), here.begin(), here.end());
  }
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files.front(), kSeedCase);
  for (const std::string& file : files) {
    const CaseFile f = parse_case_file(read(file));
    ASSERT_FALSE(f.variant.empty()) << file << " names no variant to fail on";
    EXPECT_EQ(replay_here(file, f.variant), 1) << file << " no longer fails on " << f.variant;
    EXPECT_EQ(replay_here(file, sut::fully_patched().name), 0)
        << file << " fails on the fully patched variant";
  }
}

// The fully patched variant without the change `fix` ("F3", "pr4547").
std::string patched_without(const std::string& fix) { return "patched-" + fix; }

// Fixes compose: each fix's corpus case (tests/regressions/ID_*.json, ID its finding in lower
// case without the dash: f3_, hdo02_ for pr4547) holds once its own fix is added to the variant
// it was found on, and fails on the fully patched variant with only that fix taken out, so each
// fix is checked on its own. The fixes come from the deviation table, so a new fix's case is
// found here without a list to extend; a fix without a case file here (the seed's is under
// cases/, F12's property is not replayable) is decided elsewhere.
TEST(RegressionCorpus, EachFindingsOwnFixAloneDecidesItsCase) {
  const std::string dir = std::string(SC_SOURCE_DIR) + "/tests/regressions/";
  std::vector<std::pair<std::string, std::string>> cases;  // file, its fix
  for (const sut::DeviationRow& r : sut::deviation_table()) {
    if (r.kind != sut::DeviationKind::kFix) continue;
    std::string prefix;
    for (const char* c = r.finding; *c != '\0'; ++c) {
      if (std::isalnum(static_cast<unsigned char>(*c)))
        prefix += static_cast<char>(std::tolower(*c));
    }
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix + "_", 0) == 0 && e.path().extension() == ".json") {
        cases.emplace_back(e.path().string(), r.name);
      }
    }
  }
  // F1 to F11 and pr4547 have theirs.
  ASSERT_GE(cases.size(), 12u);
  for (const auto& [file, fix] : cases) {
    const CaseFile f = parse_case_file(read(file));
    EXPECT_EQ(replay_here(file, f.variant + "+" + fix), 0)
        << file << " still fails on " << f.variant << "+" << fix;
    EXPECT_EQ(replay_here(file, patched_without(fix)), 1)
        << file << " holds on " << patched_without(fix);
  }
}

}  // namespace
}  // namespace sc::props
