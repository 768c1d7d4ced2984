// Real ranks of the real code (sim/rig/megatron_world.h): the property that compares them with the
// one-process emulation and the port fails on collective bugs of our own making (tests/real_ranks/,
// patches the emulation never runs), and a world that loses or stalls a rank ends in an error
// naming the rank, never a hang, with no worker left behind.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "model/spec.h"
#include "sim/rig/initial_values.h"
#include "sim/rig/megatron_rank.h"
#include "sim/rig/megatron_world.h"
#include "tests/support/command.h"
#include "tests/support/megatron_trees.h"
#include "tests/support/peers_python.h"

namespace sc::rig {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class RealRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(SC_MEGATRON_ARCHIVE)) GTEST_SKIP() << "no Megatron snapshot";
    tree_ = std::string(SC_MEGATRON_TREES) + "/d8b71082-pr6982";
  }
  // A bf16 and an fp32 parameter at DP 2, each with a piece on both ranks.
  static model::CaseSpec two_rank_case() {
    model::CaseSpec c;
    model::ParamSpec w, b;
    w.name = "w", w.shape = {70}, w.dtype = model::DType::kBFloat16;
    b.name = "b", b.shape = {4, 30}, b.dtype = model::DType::kFloat32, b.group = 1;
    c.params = {w, b};
    c.dp = c.expert_dp = 2;
    return c;
  }
  // Both ranks of the dense instance, built on `world`.
  static std::vector<std::unique_ptr<RankUnderTest>> build(MegatronWorld& world,
                                                           const model::CaseSpec& c) {
    const ParamValues initial = initial_values(c, /*seed=*/5);
    std::vector<std::unique_ptr<RankUnderTest>> ranks(2);
    world.on_every_rank([&](int r) {
      ranks[static_cast<size_t>(r)] =
          make_megatron_rank(world.worker(r), c, model::Instance::kDense, r, initial, false, true);
    });
    return ranks;
  }
  static std::vector<std::vector<float>> ones(const model::CaseSpec& c) {
    std::vector<std::vector<float>> g;
    for (const auto& p : c.params) g.emplace_back(static_cast<size_t>(p.numel()), 1.0f);
    return g;
  }
  std::string tree_;
};

bool gone(int pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// Each patch breaks a collective: the 1/dp scaling of the grad reduce-scatter (the emulation
// hands over reduced grads, so only real ranks run it), the bucket-to-rank mapping of that
// reduce-scatter (each rank's reduced shard lands in the next rank's part of its buffer, its own
// part keeping its unreduced grads), the param all-gather after a step (the emulation observes
// each rank's own pieces) and the expert buckets' group (expert parallelism above 1). The property
// passes on the tree without them (ctest's RealRanks.Pr6982AgainstThePatchedTree) and fails with
// each, in its own words.
TEST_F(RealRanks, EachCollectivePatchFailsTheRealRanksProperty) {
  const std::vector<std::pair<std::string, std::string>> patches = {
      {"grad-sync-sums-instead-of-averaging",
       "one-process emulation (\"port\" below) vs real ranks"},
      {"grad-reduce-scatters-into-the-next-ranks-shard",
       "one-process emulation (\"port\" below) vs real ranks"},
      {"step-skips-the-param-all-gather", "its full parameters differ from those of"},
      {"expert-buckets-reduce-over-the-dense-group", "expert rank"}};
  for (const auto& [patch, words] : patches) {
    const std::string copy = std::string(SC_MEGATRON_TREES) + "/real-ranks-" + patch;
    const auto made = testing::run_command(
        "rm -rf " + copy + " && cp -r " + tree_ + " " + copy + " && cd " + copy +
        " && GIT_CEILING_DIRECTORIES=" + SC_MEGATRON_TREES + " git apply " + SC_SOURCE_DIR +
        "/tests/real_ranks/" + patch + ".patch 2>&1");
    ASSERT_EQ(made.status, 0) << made.output;
    const auto r = testing::run_command(
        "PYTHONWARNINGS=ignore SC_VARIANT=pr6982 SC_TRANSFORMER_ENGINE=off SC_MEGATRON_TREE=" +
        copy + " RC_PARAMS='max_success=20 seed=7' " + SC_BUILD_DIR +
        "/properties/sc_properties --gtest_filter=RealRanks.MultiProcess* 2>&1");
    EXPECT_NE(r.status, 0) << patch << " survives\n" << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << patch << "\n" << r.output;
    fs::remove_all(copy);
  }
}

TEST_F(RealRanks, ARankThatDiesStopsTheWorldNamingItAndLeavesNoWorker) {
  MegatronWorld world(MegatronTarget{tree_, false}, 2);
  const model::CaseSpec c = two_rank_case();
  auto ranks = build(world, c);
  const std::vector<int> pids = {world.worker(0).pid(), world.worker(1).pid()};
  const auto start = Clock::now();
  try {
    world.on_every_rank([&](int r) {
      if (r == 1) world.worker(1).kill_now();  // dies before it joins the reduce-scatter
      ranks[static_cast<size_t>(r)]->backward(ones(c));
    });
    FAIL() << "the world went on without rank 1";
  } catch (const MegatronWorldFailed& e) {
    EXPECT_EQ(e.rank, 1) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1: the Megatron worker"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "rank 0 waited out a timeout";
  EXPECT_TRUE(world.failed());
  ranks.clear();
  for (const int pid : pids) EXPECT_TRUE(gone(pid)) << "worker " << pid << " outlived its world";
}

TEST_F(RealRanks, AStalledRankMakesTheCollectiveTimeOutNamingIt) {
  setenv("SC_MEGATRON_COLLECTIVE_TIMEOUT", "3", 1);
  MegatronWorld world(MegatronTarget{tree_, false}, 2);
  unsetenv("SC_MEGATRON_COLLECTIVE_TIMEOUT");
  const model::CaseSpec c = two_rank_case();
  auto ranks = build(world, c);
  const auto start = Clock::now();
  try {
    world.on_every_rank([&](int r) {
      if (r == 0) ranks[0]->backward(ones(c));  // rank 1 never joins
    });
    FAIL() << "rank 0's reduce-scatter returned without rank 1";
  } catch (const MegatronWorldFailed& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.rank, 0) << what;
    EXPECT_NE(what.find("finish_grad_sync"), std::string::npos) << what;
    EXPECT_NE(what.find("imed out"), std::string::npos) << what;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  // Both ranks answered, but rank 0's data-parallel group started a collective that rank 1's
  // did not: the next collective would pair the wrong messages, so the world is stopped.
  EXPECT_TRUE(world.failed());
}

// The port a world picks may be taken before rank 0's store binds it: the rendezvous fails and
// the world tries again on a fresh port.
TEST_F(RealRanks, ARendezvousOnABusyPortIsTriedAgainOnAFreshOne) {
  const int busy = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(busy, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  ASSERT_EQ(bind(busy, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(busy, 1), 0);
  ASSERT_EQ(getsockname(busy, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  setenv("SC_MEGATRON_WORLD_PORT", std::to_string(ntohs(sa.sin_port)).c_str(), 1);
  std::unique_ptr<MegatronWorld> world;
  EXPECT_NO_THROW(world = std::make_unique<MegatronWorld>(MegatronTarget{tree_, false}, 2));
  unsetenv("SC_MEGATRON_WORLD_PORT");
  close(busy);
  ASSERT_TRUE(world);
  EXPECT_EQ(world->worker(1).hello().at("world").at("rank"), 1);
  // Its stand-ins are a real rank's: none that emulates the other ranks or skips a collective.
  const std::string stand_ins = world->worker(1).hello().at("stand_ins").dump();
  EXPECT_NE(stand_ins.find("real ranks (--world-size)"), std::string::npos) << stand_ins;
  EXPECT_EQ(stand_ins.find("no_sync()"), std::string::npos) << stand_ins;
  EXPECT_EQ(stand_ins.find("are stubbed"), std::string::npos) << stand_ins;
  build(*world, two_rank_case());  // the world serves
}

// RealRanks.DpReshardableResumeEqualsNoInterruption against tree `name` of the trees made from
// the snapshot, the port fully patched, at `rc_params`, with `env` set too.
testing::CommandResult dp_reshardable_resume(const std::string& name, const std::string& rc_params,
                                             const std::string& env = "") {
  return testing::run_command("PYTHONWARNINGS=ignore SC_VARIANT=patched " + env +
                              " SC_MEGATRON_TREE=" + std::string(SC_MEGATRON_TREES) + "/" + name +
                              " RC_PARAMS='" + rc_params + "' " + SC_BUILD_DIR +
                              "/properties/sc_properties --gtest_filter=RealRanks.DpReshardable* "
                              "2>&1");
}

// `case_file` of tests/real_ranks/ (a RealRanks.TorchFormatResumeEqualsNoInterruption case)
// replayed against tree `name` of the trees made from the snapshot.
testing::CommandResult replay_on(const std::string& case_file, const std::string& name,
                                 const std::string& options = "") {
  return testing::run_command(
      "PYTHONWARNINGS=ignore SC_MEGATRON_TREE=" + std::string(SC_MEGATRON_TREES) + "/" + name +
      " " + SC_BUILD_DIR + "/bin/shardcheck-replay " + options + " " + SC_SOURCE_DIR +
      "/tests/real_ranks/" + case_file + " 2>&1");
}

// F9 through the torch format on real ranks: precision-aware bf16 with remainders saved as if
// they were the master; the load asserts on the tree with the seed fix alone, and resumes bit
// for bit once F9's patch is in.
TEST_F(RealRanks, TheTorchFormatResumeFailsOnF9AndHoldsWithItsPatch) {
  const auto bad = replay_on("f9-dp-zero-remainders-as-master.json", "d8b71082-pr6982");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("saving or loading the torch-format checkpoint: rank 0: "
                            "AssertionError"),
            std::string::npos)
      << bad.output;
  const auto fixed = replay_on("f9-dp-zero-remainders-as-master.json", "d8b71082-pr6982-F9");
  EXPECT_EQ(fixed.status, 0) << fixed.output;
}

// A finding a resume on real ranks found (F8 and F14 with the hybrid optimizer): its case
// (drawn, shrunk) fails on the tree with every patch but the finding's, saying `failure`, and
// holds on the tree with every patch and the fully patched port.
void expect_found_and_fixed(const std::string& case_file, const std::string& finding,
                            const std::string& failure) {
  const auto r = replay_on(case_file, testing::every_patch_but(finding));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(failure), std::string::npos) << r.output;
  const auto fixed = replay_on(case_file, "d8b71082-pr6982-all", "--variant=patched");
  EXPECT_EQ(fixed.status, 0) << fixed.output;
}

// F8: the torch format's loader leaves the hybrid optimizer's sub-optimizers on the master they
// had (a fresh rank's, -0.33) where 0.244 was saved; the port beside it lacks F8's fix too.
TEST_F(RealRanks, TheTorchFormatResumeFindsF8AndHoldsWithItsPatch) {
  expect_found_and_fixed("f8-dp-zero-load-skips-hdo-sync.json", "F8",
                         "right after the load: dense rank 0, real ranks never interrupted "
                         "(\"port\" below) vs resumed (\"real code\" below): entry (0, 0) "
                         "optimizer piece[0]: port 0.244117185, real code -0.330078125");
}

// F14: the hybrid optimizer's load on a fresh rank runs a dummy step whose copy-back writes the
// pre-load host copy, stepped once with random grads, over the weights just loaded: the resumed
// model piece differs right after the load (fraction 1: near the fresh rank's own initial
// value, -0.33, the last bits random).
TEST_F(RealRanks, TheTorchFormatResumeFindsF14AndHoldsWithItsPatch) {
  expect_found_and_fixed("f14-hdo-load-overwrites-the-loaded-weights.json", "F14",
                         "right after the load: dense rank 0, real ranks never interrupted "
                         "(\"port\" below) vs resumed (\"real code\" below): entry (0, 0) "
                         "model piece[0]: port 0.244140625, real code -0.3");
}

// F7 through the fully_reshardable checkpoint on real ranks: the shared embedding has a bucket
// of its own, so the second bucket's param is cut from the world tensors past the stripped end
// padding of the first; Megatron pads the short slice with zeros and the resumed exp_avg is 0.
TEST_F(RealRanks, TheFullyReshardableResumeFindsF7AndHoldsWithItsPatch) {
  expect_found_and_fixed("f7-fully-reshardable-reads-past-bucket-padding.json", "F7",
                         "right after the load: dense rank 0, real ranks never interrupted "
                         "(\"port\" below) vs resumed (\"real code\" below): entry (0, 1) "
                         "optimizer piece[0]: port 0.244117185, real code 0");
}

// F7 through resharding: saved by two real ranks, loaded by four; the shared embedding's own
// bucket comes second and its exp_avg is read past the first bucket's stripped padding.
TEST_F(RealRanks, TheReshardingPropertyFindsF7AndHoldsWithItsPatch) {
  expect_found_and_fixed("f7-reshard-reads-past-bucket-padding.json", "F7",
                         "saved at dp 2 (expert dp 2) after step 1, loaded at dp 4, variant "
                         "patched: right after the load: real ranks, dense p3 after a "
                         "fully_reshardable round trip: exp_avg: first difference at element 0: "
                         "loaded 0, saved 0.0765625015");
}

// F13 through Megatron's default distributed checkpoint on real ranks, found on its own: on the
// tree with every patch but F13's, a DP rank whose bucket shard is end padding only cannot save
// in dp_reshardable; the world names that rank and Megatron's assertion, and the case shrinks to
// one param of one element (the save fails on every rank alike, so the world serves each shrink
// step without a restart).
TEST_F(RealRanks, TheDpReshardableResumeFindsF13OnItsOwn) {
  const auto r = dp_reshardable_resume(testing::every_patch_but("F13"), "max_success=40 seed=1");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(params=\[p\d+:\w+\[1\] g\d c\d\]\})")))
      << r.output;
  EXPECT_NE(r.output.find("the dp_reshardable torch_dist checkpoint saved after step"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("'s save raised AssertionError: empty bucket encountered"),
            std::string::npos)
      << r.output;
}

// The refusal raises on every rank before any collective: the world stays in step and serves the
// next case with the same workers (a failing case, and each failing attempt of a shrink, costs
// no restart).
// F13's patch leaves a buffer in which a DP rank saves nothing out of that rank's state dict
// altogether: left as an empty dict it sat in that rank's common state dict alone, and Megatron's
// torch_dist save warned "Rank 1 common state dict differs from rank 0 common state dict" (12
// times in these 12 cases with the patch's first version). Through torch_dist (the peers'
// environment has the psutil its writer needs), on the tree with every patch: no such warning.
TEST_F(RealRanks, F13sPatchLeavesTheCommonStateAlikeOnEveryRank) {
  SC_PEERS_PYTHON_OR_SKIP(python);
  const auto r =
      dp_reshardable_resume("d8b71082-pr6982-all", "max_success=12 seed=5", "SC_PYTHON=" + python);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.output.find("common state dict differs"), std::string::npos) << r.output;
}

TEST_F(RealRanks, ACaseTheWorldCannotServeIsRefusedWithItsReason) {
  MegatronWorld world(MegatronTarget{tree_, false}, 2);
  const std::vector<int> pids = {world.worker(0).pid(), world.worker(1).pid()};
  model::CaseSpec c = two_rank_case();
  c.dp = c.expert_dp = 4;
  try {
    build(world, c);
    FAIL() << "a dp-4 case was built on a world of two";
  } catch (const MegatronWorldFailed& e) {
    EXPECT_NE(std::string(e.what()).find("the case's dp 4 is not the world size 2"),
              std::string::npos)
        << e.what();
  }
  ASSERT_FALSE(world.failed());
  EXPECT_EQ(world.worker(0).pid(), pids[0]);
  EXPECT_EQ(world.worker(1).pid(), pids[1]);
  const model::CaseSpec served = two_rank_case();
  auto ranks = build(world, served);
  world.on_every_rank([&](int r) { ranks[static_cast<size_t>(r)]->backward(ones(served)); });
  EXPECT_FALSE(world.failed());
}

// A group's collectives agree where every member started as many; a group only some ranks
// belong to is compared over its members.
TEST(CollectiveCounts, AgreeOnlyWhereEveryMemberOfEveryGroupStartedAsMany) {
  using nlohmann::json;
  EXPECT_TRUE(same_collective_counts(
      {json{{"0", 4}, {"1", 9}, {"2", 1}}, json{{"0", 4}, {"1", 9}, {"3", 7}}}));
  EXPECT_FALSE(same_collective_counts({json{{"0", 4}, {"1", 9}}, json{{"0", 4}, {"1", 10}}}));
  EXPECT_FALSE(
      same_collective_counts({json{{"0", 4}}, json{{"0", 4}}, json{{"0", 4}}, json{{"0", 3}}}));
  EXPECT_TRUE(same_collective_counts({json::object(), json{{"0", 2}}}));
}

}  // namespace
}  // namespace sc::rig
