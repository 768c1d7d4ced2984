// Real Megatron under test: scripts/verify-megatron on the seed's snapshot finds the seed bug in
// the real code and shrinks it to the seed's minimal case; with the one-line fix the
// construction and leaf properties pass; bad trees, patches and workers exit 2 with one line,
// and no worker process outlives its failure.
//
// SC_MEGATRON_ARCHIVE is the snapshot (megatron-lm-d8b71082.tar.gz) and SC_MEGATRON_TREES the
// folder scripts/megatron-trees unpacked it into (tests/CMakeLists.txt); without the snapshot
// every test here is skipped.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/rig/megatron_worker.h"
#include "tests/support/command.h"
#include "tests/support/megatron_trees.h"
#include "tests/support/peers_python.h"

namespace sc::rig {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// verify-megatron as these tests run it: without the real-ranks properties and the
// differential, which its run on a tree includes by default
// (RealCode.AVerifyRunIncludesTheRealRanksBesideTheTreesVariant), each test here checking
// something else.
std::string verify_command(bool real_ranks = false) {
  return "SC_BUILD_DIR=" + std::string(SC_BUILD_DIR) + " " + SC_SOURCE_DIR +
         "/scripts/verify-megatron" + (real_ranks ? "" : " --no-real-ranks");
}

// A few cases suffice: the seed case is found in the first ones.
testing::CommandResult verify(const std::string& arguments,
                              const std::string& rc_params = "max_success=15 seed=11") {
  return testing::run_command("RC_PARAMS='" + rc_params + "' " + verify_command() + " " +
                              arguments + " --json 2>/dev/null");
}

// The entry of property `name` in a verify-megatron --json report, or null.
const json* property(const json& report, const std::string& name) {
  for (const json& p : report.at("properties")) {
    if (p.at("name") == name) return &p;
  }
  return nullptr;
}

class RealCode : public ::testing::Test {
 protected:
  void SetUp() override {
    archive_ = SC_MEGATRON_ARCHIVE;
    trees_ = SC_MEGATRON_TREES;
    if (!fs::exists(archive_)) GTEST_SKIP() << "no Megatron snapshot at " << archive_;
  }
  std::string archive_, trees_;
};

constexpr const char* kLeaf = "ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing";
constexpr const char* kConstructs = "ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank";

TEST_F(RealCode, ThePristineSnapshotFailsTheLeafPropertyOnTheSeedsMinimalCase) {
  const auto r = verify(archive_);
  ASSERT_EQ(r.status, 1) << r.output;
  const json report = json::parse(r.output);
  EXPECT_EQ(report.at("commit"), "d8b71082ea7033974703a101ded49a359b773458");
  const json* leaf = property(report, kLeaf);
  ASSERT_NE(leaf, nullptr);
  EXPECT_FALSE(leaf->at("passed").get<bool>());
  // Shrunk to one 1-element fp32 parameter at DP 1.
  const std::string shrunk = leaf->at("counterexample");
  EXPECT_TRUE(std::regex_search(shrunk, std::regex(R"(dp=1 .*params=\[p\d+:fp32\[1\] g0 c0\])")))
      << shrunk;
  EXPECT_EQ(leaf->at("replay").get<std::string>().rfind("scripts/verify-megatron --case ", 0), 0u);
  EXPECT_NE(leaf->at("failure").get<std::string>().find("is_leaf=0"), std::string::npos);
  // Its reproduce string runs that property alone: the others are not run, not passed.
  const std::string params =
      "RC_PARAMS=\"reproduce=" + leaf->at("reproduce").get<std::string>() + "\"";
  const auto again = testing::run_command(params + " " + verify_command() + " " + archive_ +
                                          " 2>/dev/null");
  EXPECT_EQ(again.status, 1) << again.output;
  EXPECT_NE(again.output.find("FAIL  " + std::string(kLeaf) + "  (1 cases)"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("NOT RUN  " + std::string(kConstructs) +
                              ": not in the reproduce string"),
            std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("(0 cases)"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("summary: 0 passed, 1 failed or gave up"), std::string::npos)
      << again.output;
}

// The failures the fixed snapshot keeps: each is a finding of FINDINGS.md in the real code.
std::map<std::string, std::string> failures(const json& report) {
  std::map<std::string, std::string> out;
  for (const json& p : report.at("properties")) {
    if (!p.at("passed").get<bool>()) out[p.at("name")] = p.at("failure");
  }
  return out;
}

TEST_F(RealCode, WithTheSeedFixTheConstructionAndLeafPropertiesPass) {
  const auto r =
      verify(archive_ + " --patch " + std::string(SC_SOURCE_DIR) + "/patches/pr6982.patch");
  const json report = json::parse(r.output);
  EXPECT_EQ(report.at("patches"),
            json::array({std::string(SC_SOURCE_DIR) + "/patches/pr6982.patch"}));
  for (const char* name : {kLeaf, kConstructs}) {
    const json* p = property(report, name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_TRUE(p->at("passed").get<bool>()) << name << ": " << p->dump(2);
  }
  // What still fails are findings the real code has, at these cases: F1 (precision-aware
  // offload never steps the fp32 shards left on the accelerator, so fractions 0 and 1 differ),
  // F2 (a resume restarts the accelerator FusedAdam's step count, seen right after the load;
  // Transformer Engine's FusedAdam is the worker's stand-in), F6 (with overlap, the accelerator
  // step reads fp32 grads cast on the D2H stream it never waits for), F11 (a state dict saved
  // before the first step cannot be loaded), F12 (clipping fp16 decoupled grads asserts) and
  // the distributed-checkpoint resume on F5 or F13 (a dp_reshardable save on a DP rank that owns
  // only bucket padding asserts), the gathered formats on real ranks on F7, F8 or F9,
  // whichever these cases meet first, F17 (a direct grad-norm call with the inf norm raises
  // on a rank without grads), F18 (a chain whose dense optimizer is a stub cannot save) and F19
  // (a buffer built without a pg_collection raises).
  const auto failed = failures(report);
  EXPECT_EQ(r.status, 1);
  ASSERT_EQ(failed.size(), 11u) << r.output;
  EXPECT_NE(failed.at("DdpBuffers.GroupsFromParallelStateBuildWhatHandedGroupsBuild")
                .find("no attribute 'get_data_and_context_parallel_group'"),
            std::string::npos);
  EXPECT_NE(failed.at("OptimizerWrappers.TrainerLifecycleResumesAsNoInterruption")
                .find("'NoneType' object has no attribute 'param_groups'"),
            std::string::npos);
  EXPECT_NE(failed.at("StepFlow.DirectGradNormOfEveryTypeEqualsTheModel")
                .find("raised ValueError: max() arg is an empty sequence"),
            std::string::npos);
  EXPECT_NE(failed.at("DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState")
                .find("real ranks, "),
            std::string::npos);
  EXPECT_NE(failed.at("DistributedCheckpoint.ResumeEqualsNoInterruption")
                .find("loading the distributed checkpoint raised: "),
            std::string::npos);
  const auto counterexample = [&](const char* name) {
    const json* p = property(report, name);
    return p == nullptr ? std::string() : p->at("counterexample").get<std::string>();
  };
  const char* f1 = "HybridOptimizerDiff.OffloadFractionDoesNotChangeTheResult";
  EXPECT_NE(counterexample(f1).find("precision_aware=1"), std::string::npos);
  EXPECT_NE(failed.at(f1).find("fraction 1 gives"), std::string::npos);
  for (const char* f2 : {"HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption",
                         "HybridOptimizerDiff.LoadedStateLivesOnItsSubOptimizersDevice"}) {
    EXPECT_NE(counterexample(f2).find("offload_fraction=0 transformer_engine=1"),
              std::string::npos) << f2;
    EXPECT_NE(failed.at(f2).find("right after the load: step 0 loaded, 1 saved"),
              std::string::npos) << f2;
  }
  EXPECT_NE(failed.at("HybridOptimizerState.CommandSequencesMatchTheReference").find("KeyError"),
            std::string::npos);
  EXPECT_NE(failed.at("StepFlow.ClippingAndZeroCountEqualTheModel").find("AssertionError"),
            std::string::npos);
  EXPECT_NE(counterexample("StepFlow.ClippingAndZeroCountEqualTheModel").find("fp16"),
            std::string::npos);
  const char* f6 = "StreamSimulation.NoRaceBetweenStreams";
  EXPECT_NE(counterexample(f6).find("overlap=1"), std::string::npos);
  EXPECT_NE(failed.at(f6).find("(issued at hybrid_optimizer.py:93 _set_sub_optimizer_grads); "
                               "then "), std::string::npos) << failed.at(f6);
  EXPECT_FALSE(report.at("stand_ins").empty());
  EXPECT_FALSE(report.at("not_run").empty());
}

// The line after "  failure:" in a text report: the failure's first message line.
std::string first_failure_line(const std::string& report) {
  const size_t at = report.find("  failure:\n");
  if (at == std::string::npos) return "";
  const size_t start = report.find_first_not_of(' ', at + 12);
  return report.substr(start, report.find('\n', start) - start);
}

// A run on one tree includes the real-ranks properties and the differential unless asked not to,
// the port beside them under the variant of the fixes in the tree (here the seed fix and F3's
// patch, applied before), which the report names; with --no-real-ranks the report says they
// were left out of the run.
TEST_F(RealCode, AVerifyRunIncludesTheRealRanksBesideTheTreesVariant) {
  const std::string ranks = "RealRanks.MultiProcessEqualsOneProcessAndPort";
  const std::string args =
      " " + trees_ + "/d8b71082-pr6982-F3 --only " + ranks + " --json 2>/dev/null";
  const auto r = testing::run_command("RC_PARAMS='max_success=2 seed=7' " + verify_command(true) +
                                      args + " --real-ranks-cases 1");
  ASSERT_EQ(r.status, 0) << r.output;
  const json report = json::parse(r.output);
  EXPECT_EQ(report.at("real_ranks"), json({{"variant", "pr6982+F3"}, {"cases", 1}}));
  const json* p = property(report, ranks);
  ASSERT_NE(p, nullptr) << r.output;
  EXPECT_EQ(p->at("cases"), 1) << p->dump(2);
  const auto left_out =
      testing::run_command("RC_PARAMS='max_success=2 seed=7' " + verify_command() + args);
  ASSERT_EQ(left_out.status, 0) << left_out.output;
  const json without = json::parse(left_out.output);
  EXPECT_FALSE(without.contains("real_ranks"));
  bool named = false;
  for (const json& n : without.at("not_run")) {
    named |= n.at("name") == ranks &&
             n.at("why").get<std::string>().find("left out of this run") != std::string::npos;
  }
  EXPECT_TRUE(named) << without.at("not_run").dump(2);
}

// A failure against real code names the tree and its patches, never the port; its case is kept
// in the run's own folder with the tree, commit and patches it ran on; its one replay line, run
// as printed from the project's root, replays that case on that tree and fails the same way.
TEST_F(RealCode, TheReplayLineOfARealCodeFailureFailsTheSameWay) {
  const std::string save_load = "HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption";
  const std::string seed_fix = std::string(SC_SOURCE_DIR) + "/patches/pr6982.patch";
  const auto r = testing::run_command("RC_PARAMS='max_success=15 seed=7' " + verify_command() +
                                      " " + trees_ + "/d8b71082 --patch " + seed_fix +
                                      " --only " + save_load + " 2>&1");
  ASSERT_EQ(r.status, 1) << r.output;
  for (const char* port_words : {"variant upstream", ": port ", ".upstream.json",
                                 "shardcheck-replay", "RapidCheck"}) {
    EXPECT_EQ(r.output.find(port_words), std::string::npos) << port_words << " in\n" << r.output;
  }
  const std::string failure = first_failure_line(r.output);
  EXPECT_EQ(failure.rfind("megatron d8b71082 with pr6982: ", 0), 0u) << r.output;
  const size_t at = r.output.find("  replay: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string replay = r.output.substr(at + 10, r.output.find('\n', at) - at - 10);
  const std::string file = replay.substr(replay.rfind(' ') + 1);
  ASSERT_EQ(replay, "scripts/verify-megatron --case " + file) << r.output;
  EXPECT_EQ(file.find(std::string(SC_SOURCE_DIR)), std::string::npos) << "not in the checkout";
  EXPECT_EQ(fs::path(file).filename(), save_load + ".megatron.json");
  std::ifstream in(file);
  const json recorded = json::parse(in).at("megatron");
  EXPECT_EQ(recorded.at("tree"), trees_ + "/d8b71082");
  EXPECT_EQ(recorded.at("commit"), "d8b71082ea7033974703a101ded49a359b773458");
  EXPECT_EQ(recorded.at("patches"), json::array({seed_fix}));
  const auto again = testing::run_command("cd " + std::string(SC_SOURCE_DIR) + " && SC_BUILD_DIR=" +
                                          SC_BUILD_DIR + " " + replay + " 2>&1");
  EXPECT_EQ(again.status, 1) << again.output;
  EXPECT_NE(again.output.find(failure), std::string::npos) << failure << "\nnot in\n"
                                                           << again.output;
  fs::remove_all(fs::path(file).parent_path());
}

// verify-megatron --review judges one patch alone: the base is the seed fix and every finding's
// patch that changes none of its functions. A wrong fix of F3 (host copies taken from main params
// that are stale after a reload) leaves F3's property failing, named by F3's regression case, and
// F3's claim unmet; F3's own patch is "fixed by the patch" with nothing newly failing; a refactor
// of hybrid_optimizer.py that changes no behaviour has nothing newly failing.
class Review : public RealCode {
 protected:
  // The whole table at a few cases, or one property at `cases`.
  testing::CommandResult review(const std::string& patch, const std::string& more = "",
                                int cases = 6) {
    return testing::run_command("RC_PARAMS='max_success=" + std::to_string(cases) + " seed=7' " +
                                verify_command() + " " + trees_ + "/d8b71082 --review " + patch +
                                " " + more + " 2>/dev/null");
  }
  static constexpr const char* kCommands =
      " --only HybridOptimizerState.CommandSequencesMatchTheReference";
  static std::string ours(const std::string& path) { return std::string(SC_SOURCE_DIR) + path; }
};

TEST_F(Review, AWrongFixOfF3IsStillFailingWithItsCaseAndItsClaimUnmet) {
  const auto r = review(ours("/tests/review/f3-host-copies-from-stale-main-params.patch"),
                        std::string("--fixes F3") + kCommands, 20);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("left out of the base: F3-hdo-reload-keeps-stale-host-copies.patch: it "
                          "changes megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py::"
                          "HybridDeviceOptimizer.update_fp32_param_by_new_param"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("STILL FAILING  HybridOptimizerState.CommandSequencesMatchTheReference"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reproduces the regression case of F3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  case:\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("CLAIM NOT MET  F3: its regression case"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("summary: 0 newly failing, 0 fixed by the patch, 1 still failing"),
            std::string::npos) << r.output;
}

TEST_F(Review, F3sOwnPatchIsFixedByThePatchWithNothingNewlyFailing) {
  const auto r = review(ours("/patches/F3-hdo-reload-keeps-stale-host-copies.patch"),
                        std::string("--fixes F3 --json") + kCommands, 20);
  ASSERT_EQ(r.status, 0) << r.output;
  const json report = json::parse(r.output);
  EXPECT_FALSE(report.at("failed").get<bool>());
  EXPECT_TRUE(report.at("claim_failures").empty()) << report.at("claim_failures");
  int fixed = 0;
  for (const json& p : report.at("properties")) {
    EXPECT_NE(p.at("verdict"), "newly failing") << p.dump(2);
    if (p.at("verdict") == "fixed by the patch") {
      EXPECT_EQ(p.at("name"), "HybridOptimizerState.CommandSequencesMatchTheReference");
      size_t findings = 0;
      for (const auto& e : fs::directory_iterator(std::string(SC_SOURCE_DIR) + "/patches")) {
        findings += e.path().filename().string().rfind('F', 0) == 0;
      }
      EXPECT_EQ(p.at("before").at("case").at("megatron").at("patches").size(), findings)
          << "the seed fix and every finding's patch but F3's";
      ++fixed;
    }
  }
  EXPECT_EQ(fixed, 1) << r.output;
}

TEST_F(Review, ARefactorThatChangesNoBehaviourHasNothingNewlyFailing) {
  const auto r = review(ours("/tests/review/hybrid-optimizer-refactor.patch"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("summary: 0 newly failing, 0 fixed by the patch"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("verdict: nothing newly failing"), std::string::npos) << r.output;
}

// A review's bad input exits 2 with one line: a fix that does not apply, a claim that names no
// finding, --fixes without --review.
TEST_F(Review, BadInputExitsTwo) {
  const std::string bad = trees_ + "/review-bad.patch";
  std::ofstream(bad) << "--- a/megatron/core/nothing.py\n+++ b/megatron/core/nothing.py\n"
                        "@@ -1,1 +1,1 @@\n-x\n+y\n";
  for (const std::string& args :
       {" --review " + bad, " --review " + ours("/patches/F3-hdo-reload-keeps-stale-host-copies.patch") +
                                " --fixes X3 --patch " + ours("/patches/pr6982.patch"),
        std::string(" --fixes F3")}) {
    const auto r = testing::run_command(verify_command() + " " + trees_ + "/d8b71082" + args +
                                        " 2>&1 >/dev/null");
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("verify-megatron: "), std::string::npos) << args << ": " << r.output;
  }
}

// Each finding's patch alone (patches/FN-*.patch on the seed fix, after the patches its header
// requires, unpacked by scripts/megatron-trees) fixes its finding in the real code: the finding's
// regression case fails on the tree with the seed fix and holds on that tree with the patch (its
// case under tests/regressions/, or tests/real_code/ for a case only the real code has). F12's
// property is not replayable from a case file; it runs at the cases where it found F12. The cases
// of F7, F8 and F9 (gathered checkpoints at dp 1) run on a world of one real rank. F14's
// (tests/real_ranks/) meets F8 and F9 first on the seed fix alone: its Megatron-style test
// decides it.
TEST_F(RealCode, EachFindingsPatchAloneFixesItsCaseInTheRealCode) {
  // The port's corpus, and the cases only the real code has (tests/real_code/).
  const std::vector<std::string> case_dirs = {std::string(SC_SOURCE_DIR) + "/tests/regressions/",
                                              std::string(SC_SOURCE_DIR) + "/tests/real_code/"};
  // Exit 2 where the finding has no case to replay here.
  const auto replay = [&](const std::string& tree, const std::string& finding) {
    // Exported: a finding with several cases replays each, and every replay needs them.
    std::string command =
        "export PYTHONWARNINGS=ignore SC_SUT=megatron SC_MEGATRON_TREE=" + tree + "; ";
    // The findings whose property is not replayable from a case file: the property at the seed
    // that found it.
    static const std::map<std::string, std::pair<std::string, std::string>> kByProperty = {
        {"F12", {"max_success=15 seed=11", "StepFlow.ClippingAndZeroCountEqualTheModel"}},
        {"F17", {"max_success=100 seed=1", "StepFlow.DirectGradNormOfEveryTypeEqualsTheModel"}},
        // F18's shrunk case (seed 2 on the tree with F5's patch, which the lifecycle's
        // distributed chain meets first without Transformer Engine): a frozen bf16 parameter's
        // stub beside an expert's Float16OptimizerWithFloat16Params, saved before a step.
        {"F18",
         {"reproduce=BkzTwRXatlmelJ3VyFGcwVmcz9CVyFWauVmcMlmZlNWejxWZSV2c11WZzF0cO9WSuRXZyJXdwRXav5mAA"
          "AAAAAAAAIAAAAAAAAAACAAAAAAAAAgAAAAAAAAAAIAACEAAAAwAAEQA",
          "OptimizerWrappers.TrainerLifecycleResumesAsNoInterruption"}}};
    const auto by_property = kByProperty.find(finding);
    bool found = by_property != kByProperty.end();
    if (found) {
      command += "RC_PARAMS='" + by_property->second.first + "' " + std::string(SC_BUILD_DIR) +
                 "/properties/sc_properties --gtest_filter=" + by_property->second.second;
    } else {
      std::string prefix = finding;
      prefix[0] = 'f';
      for (const std::string& dir : case_dirs) {
        for (const auto& e : fs::directory_iterator(dir)) {
          const std::string name = e.path().filename().string();
          if (name.rfind(prefix + "_", 0) == 0 && e.path().extension() == ".json") {
            command += std::string(found ? " && " : "") + SC_BUILD_DIR + "/bin/shardcheck-replay " +
                       e.path().string();
            found = true;
          }
        }
      }
    }
    if (!found) return 2;
    return testing::run_command(command + " >/dev/null 2>&1").status;
  };
  const std::string seed_fix = trees_ + "/d8b71082-pr6982";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(std::string(SC_SOURCE_DIR) + "/patches")) {
    const std::string name = e.path().filename().string();
    if (name[0] != 'F') continue;
    const std::string finding = name.substr(0, name.find('-'));
    const int without = replay(seed_fix, finding);
    if (without == 2) {
      // Its case needs what a replay does not serve (F14's real ranks beside the port): its
      // Megatron-style test decides it in the real code instead (check_trees.py).
      std::string prefix = "test_" + finding;
      prefix[5] = 'f';
      bool tested = false;
      for (const auto& t : fs::directory_iterator(std::string(SC_SOURCE_DIR) +
                                                  "/tests/megatron_style")) {
        tested |= t.path().filename().string().rfind(prefix + "_", 0) == 0;
      }
      EXPECT_TRUE(tested) << finding << ": its case cannot run in the real code, and no "
                          << "tests/megatron_style/" << prefix << "_*.py decides it there";
      continue;
    }
    EXPECT_EQ(without, 1) << finding << " holds without its patch";
    EXPECT_EQ(replay(seed_fix + "-" + finding, finding), 0) << finding << " fails with " << name;
    ++checked;
  }
  EXPECT_GE(checked, 9);
}

// The command-sequence property shrinks against the real code as the other properties do: on the
// tree with every finding's patch but F3's, F3's counterexample comes down to one bf16 parameter,
// no precision-aware optimizer, offload fraction 1 and the commands Step, ReloadModelParams, Step
// (FINDINGS.md's minimal case of F3; it once stopped at six parameters).
TEST_F(RealCode, F3sCommandSequenceShrinksToItsMinimalCase) {
  std::string patches;
  for (const char* id :
       {"pr6982", "F1", "F2", "F4", "F5", "F6", "F7", "F8", "F9", "F10", "F11", "F12", "F14"}) {
    for (const auto& e : fs::directory_iterator(std::string(SC_SOURCE_DIR) + "/patches")) {
      const std::string name = e.path().filename().string();
      if (name == std::string(id) + ".patch" || name.rfind(std::string(id) + "-", 0) == 0) {
        patches += " --patch " + e.path().string();
      }
    }
  }
  const auto r = verify(trees_ + "/d8b71082" + patches +
                        " --only HybridOptimizerState.CommandSequencesMatchTheReference");
  ASSERT_EQ(r.status, 1) << r.output;
  const json report = json::parse(r.output);
  const json* p = property(report, "HybridOptimizerState.CommandSequencesMatchTheReference");
  ASSERT_NE(p, nullptr);
  const json& c = p->at("case");
  ASSERT_EQ(c.at("case").at("params").size(), 1u) << c.dump(2);
  EXPECT_EQ(c.at("case").at("params").at(0).at("dtype"), "bf16");
  EXPECT_FALSE(c.at("case").at("precision_aware").get<bool>());
  EXPECT_EQ(c.at("case").at("offload_fraction").get<double>(), 1.0);
  std::vector<std::string> commands;
  for (const json& k : c.at("commands")) commands.push_back(k.at("command"));
  EXPECT_EQ(commands, (std::vector<std::string>{"Step", "ReloadModelParams", "Step"}));
  EXPECT_NE(p->at("failure").get<std::string>().find("after Step 2,"), std::string::npos);
}

// The training-loop properties against the real code: they hold on the tree with every fix, and
// each of our training patches (tests/training/, the real-code twins of the TRAIN mutants) makes
// both fail, in the words of the training loop, on Megatron's own DistributedDataParallel.
TEST_F(RealCode, TheTrainingLoopPropertiesFailOnEachTrainingPatch) {
  const std::string all = trees_ + "/d8b71082-pr6982-all";
  const std::map<std::string, std::string> patches = {
      {"seed-fix-detaches-the-model-param", "no longer requires grad (detached from autograd)"},
      {"zero-grad-buffer-skips-expert-buffers", "expert rank 0 after "}};
  for (const char* name : {"TrainingLoop.EveryParamReceivesItsGradThroughDdp",
                           "TrainingLoop.ZeroGradClearsWhatTheNextBackwardAddsTo"}) {
    const auto clean = verify(all + " --only " + name);
    EXPECT_EQ(clean.status, 0) << name << " fails on the tree with every fix\n" << clean.output;
    for (const auto& [patch, words] : patches) {
      const auto r = verify(all + " --patch " + SC_SOURCE_DIR + "/tests/training/" + patch +
                            ".patch --only " + name);
      ASSERT_EQ(r.status, 1) << name << " survives " << patch << "\n" << r.output;
      const json report = json::parse(r.output);
      const json* p = property(report, name);
      ASSERT_NE(p, nullptr);
      EXPECT_NE(p->at("failure").get<std::string>().find(words), std::string::npos)
          << patch << ": " << p->at("failure");
    }
  }
}

// Proposal S1 groups the hybrid optimizer's host AdamWs by size; the worker reports its
// overlap_cpu_optimizer_min_numel and the placement property plans with it. Lowered to 16
// elements (so that the cases' small tensors form several groups), the proposal passes; with
// its threshold tested one element late (patches/proposals/checks/S1-off-by-one.patch) it fails.
TEST_F(RealCode, ThePlacementPropertyChecksProposalS1sGrouping) {
  const std::string checks = std::string(SC_SOURCE_DIR) + "/patches/proposals/checks/";
  const std::string base =
      trees_ + "/d8b71082-pr6982-all-S1 --patch " + checks +
      "S1-min-numel-16.patch --only HybridOptimizerDiff.PlacementEqualsTheOffloadPlan";
  // The off-by-one needs a group whose running count lands exactly on 16: more cases than
  // verify()'s few.
  const auto run = [](const std::string& arguments) {
    return testing::run_command("RC_PARAMS='max_success=200 seed=7' " + verify_command() + " " +
                                arguments + " --json 2>/dev/null");
  };
  const auto clean = run(base);
  EXPECT_EQ(clean.status, 0) << clean.output;
  const auto bad = run(base + " --patch " + checks + "S1-off-by-one.patch");
  ASSERT_EQ(bad.status, 1) << bad.output;
  const json report = json::parse(bad.output);
  const json* p = property(report, "HybridOptimizerDiff.PlacementEqualsTheOffloadPlan");
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p->at("failure").get<std::string>().find("cpu_optimizer="), std::string::npos)
      << p->at("failure");
}

// Property `name` on `tree` (RapidCheck's `rc_params`), which must fail with `failure` in its
// report: its shrunk case.
json failure_case(const std::string& name, const std::string& tree, const std::string& failure,
                  const std::string& rc_params) {
  const auto r = verify(tree + " --only " + name, rc_params);
  EXPECT_EQ(r.status, 1) << r.output;
  const json report = json::parse(r.output);
  const json* p = property(report, name);
  if (p == nullptr) {
    ADD_FAILURE() << name << " did not run: " << r.output;
    return json::object();
  }
  EXPECT_NE(p->at("failure").get<std::string>().find(failure), std::string::npos)
      << p->at("failure");
  return p->at("case");
}

// The distributed-checkpoint property on `tree` (verify's cases), which must fail with `failure`.
json checkpoint_failure_case(const std::string& tree, const std::string& failure) {
  return failure_case("DistributedCheckpoint.ResumeEqualsNoInterruption", tree, failure,
                      "max_success=15 seed=11");
}

// The same, failing on an `empty bucket encountered` save (F13, F15).
json empty_bucket_case(const std::string& tree) {
  return checkpoint_failure_case(tree, "save raised AssertionError: empty bucket encountered");
}

// shardcheck-replay of the case file `file` against the real code of `tree`.
testing::CommandResult replay_real(const std::string& tree, const std::string& file) {
  return testing::run_command("PYTHONWARNINGS=ignore SC_SUT=megatron SC_MEGATRON_TREE=" + tree +
                              " " + SC_BUILD_DIR + "/bin/shardcheck-replay " + file + " 2>&1");
}

// F5, found by the distributed-checkpoint property on its own in the real code: on the tree with
// every finding's patch but F5's, a resume of the hybrid optimizer without precision-aware
// raises `KeyError: 'step'` (FINDINGS.md, F5's second sub-case); the case shrinks to at most two
// one-element params, fails on that tree when replayed and resumes bit for bit with F5's patch.
TEST_F(RealCode, TheDistributedCheckpointPropertyFindsF5OnItsOwn) {
  const std::string without = trees_ + "/" + testing::every_patch_but("F5");
  const json c = checkpoint_failure_case(
      without, "loading the distributed checkpoint raised: KeyError: 'step'");
  ASSERT_TRUE(c.contains("case")) << c.dump(2);
  EXPECT_LE(c.at("case").at("params").size(), 2u) << c.dump(2);
  EXPECT_FALSE(c.at("case").at("precision_aware").get<bool>()) << c.dump(2);
  const fs::path shrunk = fs::path(trees_) / "f5-shrunk.json";
  std::ofstream(shrunk) << c.dump(2);
  EXPECT_EQ(replay_real(without, shrunk.string()).status, 1);
  const auto r = replay_real(trees_ + "/d8b71082-pr6982-all", shrunk.string());
  EXPECT_EQ(r.status, 0) << r.output;
}

// F13, found by the distributed-checkpoint property on its own in the real code: on the tree with
// every finding's patch but F13's, a DP group whose bucket leaves a rank only end padding cannot
// save in dp_reshardable (Megatron's default); the case shrinks to one parameter of one element
// at dp >= 2, and resumes bit for bit with F13's patch (the tree with every patch) and at dp 1.
TEST_F(RealCode, TheDistributedCheckpointPropertyFindsF13OnItsOwn) {
  json c = empty_bucket_case(trees_ + "/" + testing::every_patch_but("F13"));
  ASSERT_TRUE(c.contains("case")) << c.dump(2);
  EXPECT_EQ(c.at("case").at("params").size(), 1u) << c.dump(2);
  EXPECT_EQ(c.at("case").at("params").at(0).at("shape"), json::array({1}));
  EXPECT_GE(c.at("case").at("dp").get<int>(), 2);
  const std::string all = trees_ + "/d8b71082-pr6982-all";
  for (const int dp : {c.at("case").at("dp").get<int>(), 1}) {
    c["case"]["dp"] = dp;
    const fs::path at = fs::path(trees_) / ("f13-at-dp-" + std::to_string(dp) + ".json");
    std::ofstream(at) << c.dump(2);
    const auto r = replay_real(all, at.string());
    EXPECT_EQ(r.status, 0) << "dp " << dp << ": " << r.output;
  }
}

// F15, found by the same property on the tree with every patch but F15's (F13's included): a rank
// whose shard of a bucket lies wholly in the 64-element alignment padding between two params
// (inside the checkpoint's unpadded size, so F13's fix leaves it asserting) cannot save. Its
// literal case: two 1-element bf16 params at dp 4, DP rank 1's shard [32, 64) between them. With
// F15's patch it resumes bit for bit; with the patch's skip of that rank but not its padding
// (rank 0 saving on through the skipped shard) the save leaves [32, 64) of every bucket tensor
// unwritten, which torch_dist's plan check refuses.
TEST_F(RealCode, TheDistributedCheckpointPropertyFindsF15OnItsOwn) {
  const std::string without = trees_ + "/" + testing::every_patch_but("F15");
  const json c = empty_bucket_case(without);
  ASSERT_TRUE(c.contains("case")) << c.dump(2);
  EXPECT_GE(c.at("case").at("params").size(), 2u) << c.dump(2);
  const std::string literal =
      std::string(SC_SOURCE_DIR) +
      "/tests/real_code/f15_dp_reshardable_shard_inside_param_alignment_padding.json";
  const auto before = replay_real(without, literal);
  EXPECT_EQ(before.status, 1) << before.output;
  EXPECT_NE(before.output.find("DP rank 1's save raised AssertionError: empty bucket encountered"),
            std::string::npos)
      << before.output;
  const std::string all = trees_ + "/d8b71082-pr6982-all";
  const fs::path shrunk = fs::path(trees_) / "f15-shrunk.json";
  std::ofstream(shrunk) << c.dump(2);
  // A first draft of the patch padded rank 0's param on over rank 1's half of it: the plan check
  // refused the overlap.
  const std::string over_two_shards =
      std::string(SC_SOURCE_DIR) +
      "/tests/real_code/patch-draft-f15-one-param-over-two-shards.json";
  for (const std::string& file : {literal, shrunk.string(), over_two_shards}) {
    const auto r = replay_real(all, file);
    EXPECT_EQ(r.status, 0) << file << ": " << r.output;
  }
  const std::string half = trees_ + "/d8b71082-pr6982-all-F15-without-its-padding";
  const auto made = testing::run_command(
      "rm -rf " + half + " && cp -r " + all + " " + half + " && sed -i 's/next_param_start = " +
      "max(gbuf_local_numel, next_shard_start - shard_start)/next_param_start = " +
      "gbuf_local_numel/' " + half + "/megatron/core/optimizer/distrib_optimizer.py && grep -c " +
      "'next_param_start = gbuf_local_numel$' " + half +
      "/megatron/core/optimizer/distrib_optimizer.py 2>&1");
  ASSERT_EQ(made.status, 0) << made.output;
  const auto r = replay_real(half, literal);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("validation of its global plan: optimizer.distributed.dp_group_idx_0"
                          ".gbuf_idx_0.dtype_(torch.bfloat16, torch.bfloat16).bucket_idx_0."
                          "exp_avg: the chunks hold 33 of its 65 elements"),
            std::string::npos)
      << r.output;
}

// F16, found by the same property on the tree with every patch but F16's: a bucket split before
// a shared embedding keeps the alignment padding after its last param in its unpadded size, the
// checkpoint tensors' global shape, while the dp_reshardable save pads that param's state on to
// the shard's padded end: the chunk lies past the tensor, which torch_dist's plan check refuses.
// Its literal case: two 1-element fp16 params at dp 1, the first a shared embedding (bucket 0
// of 64 elements unpadded, 128 padded). With F16's patch both it and the shrunk case resume.
TEST_F(RealCode, TheDistributedCheckpointPropertyFindsF16OnItsOwn) {
  const std::string without = trees_ + "/" + testing::every_patch_but("F16");
  const json c = checkpoint_failure_case(without, "validation of its global plan");
  ASSERT_TRUE(c.contains("case")) << c.dump(2);
  const json& params = c.at("case").at("params");
  EXPECT_TRUE(std::any_of(params.begin(), params.end(), [](const json& p) {
    return p.at("shared_embedding").get<bool>();
  })) << c.dump(2);
  const std::string literal =
      std::string(SC_SOURCE_DIR) +
      "/tests/real_code/f16_dp_reshardable_padding_past_the_unpadded_bucket.json";
  const auto before = replay_real(without, literal);
  EXPECT_EQ(before.status, 1) << before.output;
  EXPECT_NE(before.output.find("bucket_idx_0.exp_avg: chunk at (1,) of shape (127,) lies outside "
                               "(64,)"),
            std::string::npos)
      << before.output;
  const fs::path shrunk = fs::path(trees_) / "f16-shrunk.json";
  std::ofstream(shrunk) << c.dump(2);
  for (const std::string& file : {literal, shrunk.string()}) {
    const auto r = replay_real(trees_ + "/d8b71082-pr6982-all", file);
    EXPECT_EQ(r.status, 0) << file << ": " << r.output;
  }
}

// F7, F8 and F9, found in the real code by the gathered-format property on its own, on real
// ranks: on the tree with every patch but the finding's it fails and shrinks to three params at
// most (F7 needs a shared embedding's bucket after another's padding); the shrunk case and the
// finding's regression case (dp 1: a world of one real rank) pass on the tree with every patch, and
// the regression case fails without the finding's patch. F9's load raises on every rank at the
// same point, which leaves the world in step and serving (sim/rig/megatron_world.h), so its shrink
// starts no world afresh.
TEST_F(RealCode, TheGatheredFormatsPropertyFindsF7F8AndF9OnTheirOwn) {
  struct Finding {
    std::string id, failure, regression, rc_params;
  };
  const std::vector<Finding> findings = {
      {"F7", "after a fully_reshardable round trip: exp_avg: first difference at element 0",
       "f7_fully_reshardable_reads_past_bucket_padding", "max_success=100 seed=3"},
      {"F8", "after a dp_zero_gather_scatter round trip: fp32 master: first difference",
       "f8_dp_zero_load_skips_hdo_sync", "max_success=60 seed=11"},
      {"F9", "in set_scaled_state", "f9_dp_zero_remainders_as_master", "max_success=60 seed=11"},
  };
  const char* name = "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState";
  for (const Finding& f : findings) {
    SCOPED_TRACE(f.id);
    const std::string without = trees_ + "/" + testing::every_patch_but(f.id);
    const json c = failure_case(name, without, f.failure, f.rc_params);
    ASSERT_TRUE(c.contains("case")) << c.dump(2);
    EXPECT_LE(c.at("case").at("params").size(), 3u) << c.dump(2);
    const fs::path shrunk = fs::path(trees_) / (f.id + "-gathered-shrunk.json");
    std::ofstream(shrunk) << c.dump(2);
    const std::string regression =
        std::string(SC_SOURCE_DIR) + "/tests/regressions/" + f.regression + ".json";
    EXPECT_EQ(replay_real(without, regression).status, 1) << regression;
    for (const std::string& file : {regression, shrunk.string()}) {
      const auto r = replay_real(trees_ + "/d8b71082-pr6982-all", file);
      EXPECT_EQ(r.status, 0) << file << ": " << r.output;
    }
  }
}

// The worker's check of the save plan against Megatron's own torch_dist save
// (tests/real_code/plan_check_against_torch_dist.py, in the peers' environment, whose psutil the
// asynchronous writer needs): on one rank's chunks of one tensor both accept the tensor covered
// once and a hole (torch checks the volume only for more than one rank), and both refuse F16's
// chunk past the tensor's end and two chunks over one element; on two ranks (processes over
// Gloo) both accept the tensor covered and refuse the hole F15's patch without its padding left.
TEST_F(RealCode, ThePlanCheckAgreesWithTorchDistsOwnSave) {
  SC_PEERS_PYTHON_OR_SKIP(python);
  const auto r = testing::run_command(python + " " + SC_SOURCE_DIR +
                                      "/tests/real_code/plan_check_against_torch_dist.py " +
                                      trees_ + "/d8b71082-pr6982-all 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::vector<std::string> verdicts;
  for (std::string line; std::getline(lines, line);) {
    const json v = json::parse(line);
    const auto first_word = [](const json& s) {
      const std::string text = s.get<std::string>();
      return text.substr(0, text.find(':'));
    };
    EXPECT_EQ(first_word(v.at("worker")), first_word(v.at("torch_dist"))) << line;
    verdicts.push_back(first_word(v.at("torch_dist")));
  }
  EXPECT_EQ(verdicts, (std::vector<std::string>{"accepted", "refused", "refused", "accepted",
                                                "accepted", "refused"}))
      << r.output;
}

// P6: the one-process emulation runs no param all-gather, so DP rank 0's weights, the main
// replica a distributed checkpoint saves, held only rank 0's stepped pieces; a rank whose fp32
// param the precision-aware optimizer steps in place resumed rank 0's stale copy of its piece.
// The save now keeps every rank's pieces and the load lays them over the weights, as real ranks'
// all-gathered weights hold them: the case resumes bit for bit.
TEST_F(RealCode, TheOneProcessCheckpointHoldsEveryRanksSteppedPieces) {
  const auto r = replay_real(
      trees_ + "/d8b71082-pr6982-all",
      std::string(SC_SOURCE_DIR) +
          "/tests/real_code/p6-one-process-checkpoint-without-the-param-all-gather.json");
  EXPECT_EQ(r.status, 0) << r.output;
}

// A case that needs a gathered checkpoint or the pinned memory of each copy cannot run against
// the real code: the replay says so and exits 2, never 1 as if the finding
// were present there.
TEST_F(RealCode, ReplayingACaseTheRealCodeCannotRunExitsTwo) {
  const std::string regressions = std::string(SC_SOURCE_DIR) + "/tests/regressions/";
  // A gathered checkpoint at dp 3: real ranks run worlds of 1, 2 and 4.
  json at_dp3 = json::parse(
      std::ifstream(regressions + "f7_fully_reshardable_reads_past_bucket_padding.json"));
  at_dp3["case"]["dp"] = at_dp3["case"]["expert_dp"] = 3;
  const fs::path dp3 = fs::path(trees_) / "f7-at-dp-3.json";
  std::ofstream(dp3) << at_dp3.dump(2);
  for (const std::string& file :
       {dp3.string(), regressions + "hdo02_fp32_copies_lose_pinning.json"}) {
    const auto r = testing::run_command(
        "PYTHONWARNINGS=ignore SC_SUT=megatron SC_MEGATRON_TREE=" + trees_ + "/d8b71082-pr6982 " +
        SC_BUILD_DIR + "/bin/shardcheck-replay " + file + " 2>&1");
    EXPECT_EQ(r.status, 2) << file << ": " << r.output;
    EXPECT_NE(r.output.find("cannot run here"), std::string::npos) << r.output;
  }
}

// The maintainer's report (verify-megatron --report): per finding, its status on the tree
// measured now, with the patch and the Megatron-style test.
TEST_F(RealCode, TheReportMeasuresEachFindingOnTheTree) {
  const fs::path out = fs::path(trees_) / "report.md";
  const auto r = testing::run_command(
      std::string(SC_SOURCE_DIR) + "/scripts/finding-report --tree " + trees_ +
      "/d8b71082-pr6982 --name d8b71082-pr6982 --build " + SC_BUILD_DIR + " --out " +
      out.string() + " --finding F1 --finding F7 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(out);
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* expected :
       {"## F1: ", "f1_hdo_accelerator_fp32_shard_never_updated.json`: present (exit 1)",
        "test_f1_hdo_accelerator_fp32_shard_never_updated.py`: fails: present", "```diff",
        "**How Megatron's training loop reaches it.**", "#7449", "| F1 | present",
        "## F7: ", "f7_fully_reshardable_reads_past_bucket_padding.json`: present (exit 1)"}) {
    EXPECT_NE(report.find(expected), std::string::npos) << "no '" << expected << "' in\n"
                                                        << report;
  }
  EXPECT_EQ(report.find("## F2: "), std::string::npos) << "F2 was not asked for";
}

TEST_F(RealCode, AFolderThatIsNoMegatronTreeExitsTwo) {
  const fs::path empty = fs::path(trees_) / "not-a-tree";
  fs::create_directories(empty);
  const auto r = testing::run_command(verify_command() + " " + empty.string() + " 2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("not_a_tree"), std::string::npos) << r.output;
  EXPECT_EQ(testing::run_command(verify_command() + " /no/such/tree 2>&1").status, 2);
}

TEST_F(RealCode, APatchThatDoesNotApplyExitsTwo) {
  const fs::path patch = fs::path(trees_) / "bad.patch";
  std::ofstream(patch) << "--- a/megatron/core/no_such_file.py\n+++ b/megatron/core/no_such_file.py\n"
                          "@@ -1 +1 @@\n-x = 1\n+x = 2\n";
  const auto r = testing::run_command(verify_command() + " " + archive_ + " --patch " +
                                      patch.string() + " 2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("does not apply"), std::string::npos) << r.output;
}

TEST_F(RealCode, ATreeWhoseApiMovedExitsTwoNamingWhatMoved) {
  const fs::path moved = fs::path(trees_) / "api-moved";
  fs::remove_all(moved);
  fs::copy(fs::path(trees_) / "d8b71082", moved, fs::copy_options::recursive);
  const fs::path file = moved / "megatron/core/optimizer/distrib_optimizer.py";
  ASSERT_EQ(testing::run_command("sed -i 's/_build_model_and_main_param_groups/_renamed_groups/g' " +
                                 file.string()).status, 0);
  const auto r = testing::run_command(verify_command() + " " + moved.string() + " 2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("api_moved"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("_build_model_and_main_param_groups"), std::string::npos) << r.output;
}

// A stand-in worker script that records its PID, then does what `body` says.
std::string fake_worker(const fs::path& dir, const std::string& name, const std::string& body) {
  const fs::path script = dir / (name + ".py");
  std::ofstream(script) << "import os, sys, time\n"
                        << "open(sys.argv[0] + '.pid', 'w').write(str(os.getpid()))\n"
                        << body;
  return script.string();
}

bool alive(const fs::path& pid_file) {
  std::ifstream in(pid_file);
  int pid = 0;
  in >> pid;
  return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

TEST_F(RealCode, AWorkerThatHangsIsKilledAfterTheTimeout) {
  const std::string script = fake_worker(trees_, "hangs", "time.sleep(600)\n");
  setenv("SC_MEGATRON_WORKER", script.c_str(), 1);
  setenv("SC_MEGATRON_TIMEOUT", "1", 1);
  const auto start = std::chrono::steady_clock::now();
  MegatronWorker worker(MegatronTarget{trees_ + "/d8b71082", false});
  EXPECT_THROW(worker.hello(), MegatronUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(alive(script + ".pid"));
  unsetenv("SC_MEGATRON_WORKER");
  unsetenv("SC_MEGATRON_TIMEOUT");
}

TEST_F(RealCode, AWorkerThatDiesServingARequestFailsThatRequestAndIsStartedAgain) {
  const std::string script = fake_worker(
      trees_, "dies",
      "print('{\"ready\": true}', flush=True)\nsys.stdin.readline()\nos._exit(3)\n");
  setenv("SC_MEGATRON_WORKER", script.c_str(), 1);
  MegatronWorker worker(MegatronTarget{trees_ + "/d8b71082", false});
  EXPECT_THROW(worker.request({{"op", "observe"}, {"handle", 1}}), MegatronWorkerLost);
  EXPECT_FALSE(alive(script + ".pid"));
  const uint64_t generation = worker.generation();
  EXPECT_THROW(worker.request({{"op", "observe"}, {"handle", 1}}), MegatronWorkerLost);
  EXPECT_EQ(worker.generation(), generation + 1);  // a fresh worker served the second request
  unsetenv("SC_MEGATRON_WORKER");
}

// The binary encoding: values go after the request's line and come back after the reply's, bit
// for bit (a negative zero, an infinity and a NaN among them); a reply whose span points past the
// bytes it sent is a lost worker, which is stopped.
TEST_F(RealCode, ValuesCrossAsRawBytesAndASpanPastThemIsALostWorker) {
  const std::string script = fake_worker(
      trees_, "echoes",
      "import json\nprint('{\"ready\": true}', flush=True)\nfor first in (0, 4):\n"
      "    request = json.loads(sys.stdin.buffer.readline())\n"
      "    blob = sys.stdin.buffer.read(request['blob_bytes'])\n"
      "    reply = {'id': request['id'], 'ok': True, 'blob_bytes': len(blob),\n"
      "             'values': {'blob': [first, len(blob)]}}\n"
      "    sys.stdout.buffer.write(json.dumps(reply).encode() + b'\\n' + blob)\n"
      "    sys.stdout.buffer.flush()\ntime.sleep(600)\n");
  setenv("SC_MEGATRON_WORKER", script.c_str(), 1);
  MegatronWorker worker(MegatronTarget{trees_ + "/d8b71082", false});
  const std::vector<float> sent = {1.5f, -0.0f, std::numeric_limits<float>::infinity(),
                                   std::numeric_limits<float>::quiet_NaN()};
  const std::vector<float> back =
      from_bits(worker.request({{"op", "echo"}, {"values", to_bits(sent)}}).at("values"));
  ASSERT_EQ(back.size(), sent.size());
  EXPECT_EQ(std::memcmp(back.data(), sent.data(), sent.size() * sizeof(float)), 0);
  try {
    worker.request({{"op", "echo"}, {"values", to_bits(sent)}});
    FAIL() << "a span past the reply's bytes was accepted";
  } catch (const MegatronWorkerLost& e) {
    EXPECT_NE(std::string(e.what()).find("blob span outside"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(alive(script + ".pid"));
  unsetenv("SC_MEGATRON_WORKER");
}

TEST_F(RealCode, PythonRaisingIsAnErrorReplyAndTheWorkerGoesOn) {
  MegatronWorker worker(MegatronTarget{trees_ + "/d8b71082", false});
  try {
    worker.request({{"op", "observe"}, {"handle", 12345}});
    FAIL() << "no error for an unknown handle";
  } catch (const MegatronRaised& e) {
    EXPECT_NE(std::string(e.what()).find("KeyError"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(worker.request({{"op", "drop"}, {"handle", 12345}}));
}

}  // namespace
}  // namespace sc::rig

// A release as its users get it: verify-megatron megatron-core==X has scripts/megatron-release
// fetch the release with pip into a cache, check it against the registry's sha256 and unpack it
// as a tree, which then runs as any TREE does, named megatron-core==X. These reach the registry
// through pip; where none is reachable they are skipped, saying so.
namespace sc::rig {
namespace {

// The environment of a release run: the cache under `cache`, pip from the interpreter the build
// records (the worker's, so that no other environment is made for the fresh cache).
std::string release_env(const fs::path& cache) {
  std::ifstream in(std::string(SC_BUILD_DIR) + "/.sc-python");
  std::string python;
  std::getline(in, python);
  return "XDG_CACHE_HOME=" + cache.string() + " SC_PYTHON=" + python + " ";
}

bool no_registry(const std::string& output) {
  return output.find("megatron-release: no registry") != std::string::npos;
}

std::string text_of(const fs::path& file) {
  std::ifstream in(file);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The pristine release still has the seed bug: the construction property fails there and
// shrinks to the seed's case; with the seed fix it passes, the second run served by the cache.
TEST_F(RealCode, TheReleaseFromPipRunsAsATree) {
  const fs::path cache = fs::path(trees_) / "release-cache";
  const fs::path log = fs::path(trees_) / "release.log";
  fs::remove_all(cache);
  const std::string run = "RC_PARAMS='max_success=5 seed=7' " + release_env(cache) +
                          verify_command() + " megatron-core==0.19.2 --only " + kConstructs +
                          " --json";
  const auto r = testing::run_command(run + " 2>" + log.string());
  if (r.status == 2 && no_registry(text_of(log))) GTEST_SKIP() << text_of(log);
  ASSERT_EQ(r.status, 1) << text_of(log) << r.output;
  const json report = json::parse(r.output);
  EXPECT_EQ(report.at("tree"), "megatron-core==0.19.2");
  // The commit a release has not: the registry's sha256 of the file, which the wheel has.
  const fs::path entry = cache / "shardcheck/megatron-core/0.19.2";
  const auto wheel = testing::run_command("cd " + entry.string() + " && sha256sum *.whl");
  ASSERT_EQ(wheel.status, 0) << wheel.output;
  EXPECT_EQ(report.at("commit"), "wheel sha256:" + wheel.output.substr(0, 64));
  EXPECT_TRUE(fs::exists(entry / "megatron-core-0.19.2/megatron/core/optimizer/distrib_optimizer.py"));
  const json* construction = property(report, kConstructs);
  ASSERT_NE(construction, nullptr);
  EXPECT_FALSE(construction->at("passed").get<bool>());
  const std::string failure = construction->at("failure");
  EXPECT_NE(failure.find("megatron megatron-core==0.19.2: "), std::string::npos) << failure;
  EXPECT_NE(failure.find("can't optimize a non-leaf Tensor"), std::string::npos) << failure;
  const std::string shrunk = construction->at("counterexample");
  EXPECT_TRUE(std::regex_search(shrunk, std::regex(R"(dp=1 .*params=\[p\d+:fp32\[1\] g0 c0\])")))
      << shrunk;

  const auto fixed = testing::run_command(run + " --patch " + SC_SOURCE_DIR +
                                          "/patches/pr6982.patch 2>" + log.string());
  ASSERT_EQ(fixed.status, 0) << text_of(log) << fixed.output;
  EXPECT_NE(text_of(log).find("megatron-core==0.19.2 from the cache"), std::string::npos)
      << text_of(log);
  const json with_fix = json::parse(fixed.output);
  EXPECT_EQ(with_fix.at("tree"), "megatron-core==0.19.2");
  EXPECT_TRUE(property(with_fix, kConstructs)->at("passed").get<bool>());
}

TEST_F(RealCode, AReleaseThatDoesNotExistExitsTwoNamingTheOnesThatDo) {
  const fs::path cache = fs::path(trees_) / "release-cache-missing";
  fs::remove_all(cache);
  const auto r = testing::run_command(release_env(cache) + verify_command() +
                                      " megatron-core==0.0.404 2>&1");
  if (r.status == 2 && no_registry(r.output)) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output;
  for (const char* expected :
       {"megatron-core==0.0.404 does not exist; the registry has 0.1.0, ", " 0.19.2"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(cache / "shardcheck/megatron-core/0.0.404")) << "left in the cache";
  // A spec that names no one release is refused before pip is asked.
  for (const char* spec : {"megatron-core==", "'megatron-core>=1'", "megatron-core"}) {
    const auto bad = testing::run_command(release_env(cache) + verify_command() + " " + spec +
                                          " 2>&1");
    EXPECT_EQ(bad.status, 2) << spec << ": " << bad.output;
    EXPECT_NE(bad.output.find("name one release exactly, as megatron-core==X"),
              std::string::npos) << bad.output;
  }
}

// A file that is not the one the registry lists is refused and not cached. The registry is a
// stand-in here: a `python -m pip` whose report gives one sha256 and whose download another file.
TEST_F(RealCode, AReleaseFileThatIsNotTheRegistrysIsRefused) {
  const fs::path dir = fs::path(trees_) / "release-mismatch";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path pip = dir / "python";
  std::ofstream(pip) << "#!/bin/sh\n"
                        "shift 2\ncommand=$1\n"
                        "while [ $# -gt 0 ]; do\n"
                        "  case $1 in --report) report=$2 ;; -d) dest=$2 ;; esac\n  shift\n"
                        "done\nname=megatron_core-0.19.2-py3-none-any.whl\n"
                        "case $command in\n"
                        "  install) printf '{\"install\": [{\"download_info\": {\"url\": "
                        "\"registry/%s\", \"archive_info\": {\"hashes\": {\"sha256\": \"%s\"}}}}]}'"
                        " $name " + std::string(64, '0') + " > \"$report\" ;;\n"
                        "  download) echo 'not the registry file' > \"$dest/$name\" ;;\n"
                        "esac\n";
  fs::permissions(pip, fs::perms::owner_all);
  const auto r = testing::run_command("XDG_CACHE_HOME=" + (dir / "cache").string() +
                                      " SC_PYTHON=" + pip.string() + " " + verify_command() +
                                      " megatron-core==0.19.2 2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("megatron_core-0.19.2-py3-none-any.whl: sha256 "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("is not the registry's 0000"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "cache/shardcheck/megatron-core/0.19.2")) << "cached anyway";
}

}  // namespace
}  // namespace sc::rig
