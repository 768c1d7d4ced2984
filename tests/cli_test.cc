// The shardcheck-sim command line: bad input gets a clear message and exit status 2; a small
// world prints one row per rank for each variant.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/app/cli.h"
#include "sim/app/jobs.h"

namespace sc::app {
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
  // No layout of 64 stages: Megatron's even split cannot take 43 layers.
  expect_rejected({"--pp=8", "--vpp=8"},
                  "num_layers=43 should be divisible by config.pipeline_model_parallel_size=8");
  expect_rejected({"--model=mixed-dtype-net", "--pp=2", "--vpp=1", "--ep=1"},
                  "pp = 2 exceeds the 1 decoder layers");
  expect_rejected({"--model=llama", "--pp=64", "--vpp=1", "--ep=1"},
                  "pp = 64 exceeds the 32 decoder layers");
  expect_rejected({"--model=llama", "--pp=4", "--vpp=3", "--ep=1"},
                  "num_layers_per_pipeline_rank 8 should be divisible by vp_size 3");
  expect_rejected({"--model-file=" + std::string(SC_SOURCE_DIR) + "/models/tiny-moe.json",
                   "--pp=1", "--vpp=1", "--ep=3", "--dp=3"},
                  "impossible world for tiny-moe: ep=3 does not divide the 8 experts");
}

TEST(Cli, RejectsMalformedArguments) {
  expect_rejected({"--dp=4x"}, "--dp=4x");
  expect_rejected({"--seed=-1"}, "expected a decimal seed");
  expect_rejected({"--frobnicate=1"}, "unknown option '--frobnicate'");
  expect_rejected({"dp=4"}, "unexpected argument 'dp=4'");
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

TEST(Cli, RejectsBadBucketSizes) {
  expect_rejected({"--bucket-size=0"}, "--bucket-size=0: expected a positive element count or none");
  expect_rejected({"--bucket-size=-5"}, "expected a positive element count or none");
  expect_rejected({"--bucket-size=big"}, "expected a positive element count or none");
}

TEST(Cli, RejectsBadSteps) { expect_rejected({"--steps=-1"}, "expected an integer from 0 to 100"); }

std::string models_dir() { return std::string(SC_SOURCE_DIR) + "/models/"; }

// The "ranks" part of a --json run: everything but the config line.
std::string ranks_of(const CliRun& r) { return r.out.substr(r.out.find("\"ranks\"")); }

TEST(Cli, ModelFilesGiveTheSameWorldAsTheBuiltInModels) {
  const std::vector<std::string> small{"--pp=1", "--vpp=1", "--ep=1", "--dp=2", "--json",
                                       "--offload-fraction=0.5", "--layout-only"};
  const std::vector<std::string> full{"--pp=8", "--vpp=3", "--ep=4", "--dp=8", "--json",
                                      "--layout-only"};
  for (const auto& [name, world] : {std::make_pair("mixed-dtype-net", small),
                                    std::make_pair("dsv4-flash", full)}) {
    std::vector<std::string> built = world, file = world;
    built.push_back(std::string("--model=") + name);
    file.push_back("--model-file=" + models_dir() + name + ".json");
    const CliRun a = run(built), b = run(file);
    ASSERT_EQ(a.status, 0) << a.err;
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(ranks_of(a), ranks_of(b)) << name;
    EXPECT_NE(b.out.find(std::string("model=") + name + " model_file="), std::string::npos);
  }
}

TEST(Cli, TheExampleModelFileRunsWithTensors) {
  const CliRun r = run({"--model-file", models_dir() + "tiny-moe.json", "--pp", "2", "--vpp=1",
                        "--ep=2", "--dp=2", "--scale=16", "--variant=upstream,hdo-load-alias"});
  ASSERT_EQ(r.status, 0) << r.err;
  // Every stage holds fp32 gates, so every rank fails upstream and none with the fixes.
  EXPECT_NE(r.out.find("upstream: 4 of 4 ranks fail construction"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hdo-load-alias: 0 of 4 ranks fail construction"), std::string::npos);
}

// Writes `text` to a file of the test's temporary directory and returns its path.
std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, BadModelFilesExitTwoNamingTheFileAndTheLineOrField) {
  const std::string syntax =
      temp_file("syntax.json", "{\n  \"name\": \"m\",\n  \"num_layers\": }\n");
  expect_rejected({"--model-file=" + syntax}, "syntax.json:3:17: syntax error");
  const std::string dtype = temp_file(
      "dtype.json", R"({"name": "m", "num_layers": 1, "params": [
        {"name": "a", "shape": [4], "place": 0}, {"name": "b", "shape": [4], "dtype": "bf61",
         "place": 0}]})");
  expect_rejected({"--model-file=" + dtype, "--pp=1", "--vpp=1"},
                  "dtype.json: params[1].dtype: unknown dtype \"bf61\"");
  expect_rejected({"--model-file=" + testing::TempDir() + "absent.json"},
                  "absent.json: cannot open the model file");
  expect_rejected({"--model-file="}, "--model-file=: expected a file name");
  expect_rejected({"--model=llama", "--model-file=" + dtype}, "exclude each other");
  // The multi-process mode loads model files through the same loader.
  expect_rejected({"--model-file=" + dtype, "--processes=2", "--variant=pr6982", "--pp=1",
                   "--vpp=1", "--ep=1", "--dp=2"},
                  "dtype.json: params[1].dtype: unknown dtype \"bf61\"");
  // The world is checked against the file's counts: 1 layer cannot fill pp * vpp = 24 chunks.
  const std::string tiny = models_dir() + "mixed-dtype-net.json";
  expect_rejected({"--model-file=" + tiny}, "impossible world for mixed-dtype-net");
}

TEST(Cli, HelpListsTheModelFileAndStatsOptions) {
  const CliRun r = run({"--help"});
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--model-file=FILE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--stats "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("as the next argument"), std::string::npos) << r.out;
}

TEST(Cli, OptionValuesMayFollowAsTheNextArgument) {
  auto parsed = parse_cli({"--dp", "2", "--model", "llama", "--offload-fraction", "0.25"});
  ASSERT_TRUE(std::holds_alternative<CliOptions>(parsed));
  const CliOptions& o = std::get<CliOptions>(parsed);
  EXPECT_EQ(o.world.dp, 2);
  EXPECT_EQ(o.model, "llama");
  EXPECT_EQ(o.offload_fraction, 0.25);
  expect_rejected({"--dp"}, "--dp needs a value");
  expect_rejected({"--dp", "x"}, "--dp=x: expected an integer");
}

TEST(Cli, JsonSplitsTheBytesOfEachRankByKindAndSide) {
  // mixed-dtype-net at dp 1, everything offloaded, grads reduced in fp32:
  //   bf16 buffer, reverse order: fc2.bias [0, 32), fc2.weight [64, 2112), fc1.bias
  //   [2112, 2176), fc1.weight [2176, 10368); 10368 is a multiple of 128.
  //     params 10368 * 2 = 20736 B, grads (fp32) 10368 * 4 = 41472 B
  //   fp32 buffer: alpha [0, 512): params 2048 B, grads 2048 B
  //   accelerator: param_buffer 20736 + 2048 = 22784, grad_buffer 41472 + 2048 = 43520
  //   host: every piece (8192 + 64 + 512 + 2048 + 32 = 10848 elements) has an fp32 copy,
  //     10848 * 4 = 43392 B, a host grad of the same size, and state 10848 * 8 = 86784 B
  const CliRun r = run({"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1", "--dp=1",
                        "--variant=pr6982", "--layout-only", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto rank = nlohmann::json::parse(r.out).at("ranks").at(0);
  const auto& accel = rank.at("bytes").at("accelerator");
  const auto& host = rank.at("bytes").at("host");
  EXPECT_EQ(accel.at("param_buffer"), 22784);
  EXPECT_EQ(accel.at("grad_buffer"), 43520);
  EXPECT_EQ(accel.at("main_params"), 0);
  EXPECT_EQ(accel.at("optimizer_state"), 0);
  EXPECT_EQ(host.at("main_params"), 43392);
  EXPECT_EQ(host.at("grad_copies"), 43392);
  EXPECT_EQ(host.at("optimizer_state"), 86784);
  EXPECT_EQ(rank.at("accel_bytes"), 22784 + 43520);  // after construction
  EXPECT_EQ(rank.at("host_bytes"), 43392);
  EXPECT_EQ(rank.at("bytes").at("host_pinned"), 0);  // no CUDA accelerator
  // The table shows the totals once stepped: host 43392 + 43392 + 86784 = 173568.
  const CliRun table = run({"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1", "--dp=1",
                            "--variant=pr6982", "--layout-only"});
  std::istringstream row(table.out.substr(table.out.find("\npr6982 ") + 1));
  std::vector<std::string> cells(13);
  for (std::string& cell : cells) row >> cell;
  // accel_bytes, host_bytes, accel_step, host_step
  EXPECT_EQ(std::vector<std::string>(cells.begin() + 9, cells.end()),
            (std::vector<std::string>{"66304", "43392", "66304", "173568"}))
      << table.out;
}

TEST(Cli, StatsReportTimeAndPeakMemoryOfTheFullSizeLayoutOnlyWorld) {
  // EP 4 needs a DP size it divides: the full-size seed world at DP 4 (expert DP 1).
  const CliRun r = run({"--model=dsv4-flash", "--layout-only", "--pp=8", "--vpp=3", "--ep=4",
                        "--dp=4", "--stats"});
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t at = r.out.find("stats: wall ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" MiB", at), std::string::npos);
  const CliRun j = run({"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1", "--dp=1",
                        "--layout-only", "--json", "--stats"});
  const auto stats = nlohmann::json::parse(j.out).at("stats");
  EXPECT_GT(stats.at("peak_rss_bytes").get<int64_t>(), 1 << 20);
  EXPECT_GE(stats.at("wall_s").get<double>(), 0.0);
  // Without --stats nothing is measured.
  EXPECT_EQ(run({"--model=mixed-dtype-net", "--pp=1", "--vpp=1", "--ep=1", "--layout-only"})
                .out.find("stats:"),
            std::string::npos);
}

const std::vector<std::string> kLlamaSmall{"--model=llama", "--ep=1", "--layout-only", "--json",
                                           "--variant=pr6982"};

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The "params" column of a --json run, one value per rank.
std::vector<int> params_per_rank(const CliRun& r) {
  std::vector<int> out;
  const nlohmann::json parsed = nlohmann::json::parse(r.out);
  for (const auto& rank : parsed.at("ranks")) {
    out.push_back(rank.at("params").get<int>());
  }
  return out;
}

TEST(Cli, TheSeedWorldUsesTheModelsPipelineLayout) {
  const CliRun r = run({"--layout-only", "--variant=pr6982", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("tp=1 pp=8 vpp=3 pipeline_layout=Et|(tt|)*20t|t|mL ep=4"),
            std::string::npos)
      << r.out.substr(0, 300);
  // Without it Megatron cannot split the 43 layers.
  expect_rejected({"--pipeline-layout=none"}, "num_layers=43 should be divisible");
  // Another world does not take a layout of 24 stages.
  expect_rejected({"--pp=4", "--vpp=3"}, "num_layers=43 should be divisible by");
}

TEST(Cli, PipelineLayoutPlacesTheLayers) {
  // Llama: 6 parameters per layer; stage 0 holds the embedding and 10 layers, stage 1 the other
  // 22, the final norm and the output layer.
  const CliRun r =
      run(plus(kLlamaSmall, {"--pp=2", "--vpp=1", "--dp=1", "--pipeline-layout=Et*10|t*22L"}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(params_per_rank(r), (std::vector<int>{61, 134}));
  expect_rejected(plus(kLlamaSmall, {"--pp=2", "--vpp=1", "--pipeline-layout=Et|tL"}),
                  "pipeline layout: 2 decoder layers (t), but the model has 32");
  expect_rejected({"--pipeline-layout=Et|tx"}, "--pipeline-layout=Et|tx: invalid layer character");
  expect_rejected({"--pipeline-layout="}, "expected a layout");
  expect_rejected({"--pipeline-layout=Et|tL", "--first-stage-layers=1"}, "excludes");
}

TEST(Cli, UnevenFirstAndLastStages) {
  // 32 layers over PP 4: 2 on the first stage, 6 on the last, 12 on each middle stage.
  const CliRun r = run(plus(kLlamaSmall, {"--pp=4", "--vpp=1", "--dp=1", "--first-stage-layers=2",
                                          "--last-stage-layers=6"}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(params_per_rank(r), (std::vector<int>{1 + 12, 72, 72, 36 + 2}));
  EXPECT_NE(r.out.find("first_stage_layers=2 last_stage_layers=6"), std::string::npos);
  expect_rejected(plus(kLlamaSmall, {"--pp=4", "--vpp=2", "--first-stage-layers=3"}),
                  "number of layers at first stage: 3 must be divisible by virtual pipeline");
  expect_rejected({"--first-stage-layers=0"}, "--first-stage-layers=0: expected an integer");
}

TEST(Cli, TensorParallelShardsTheShapesAndSimulatesTpRankZero) {
  const std::vector<std::string> world{"--pp=2", "--vpp=1", "--dp=2", "--offload=off"};
  const CliRun one = run(plus(plus(kLlamaSmall, world), {"--tp=1"}));
  const CliRun two = run(plus(plus(kLlamaSmall, world), {"--tp=2"}));
  ASSERT_EQ(one.status, 0) << one.err;
  ASSERT_EQ(two.status, 0) << two.err;
  EXPECT_NE(two.out.find(" tp=2 tp_rank=0 pp=2"), std::string::npos) << two.out.substr(0, 200);
  EXPECT_EQ(params_per_rank(one), params_per_rank(two));  // sharded, not dropped
  const auto a = nlohmann::json::parse(one.out).at("ranks");
  const auto b = nlohmann::json::parse(two.out).at("ranks");
  for (size_t i = 0; i < a.size(); ++i) {
    // Everything but the norms is split in two: a little over half of the bytes remain.
    const double full = a[i].at("bytes").at("accelerator").at("param_buffer").get<double>();
    const double half = b[i].at("bytes").at("accelerator").at("param_buffer").get<double>();
    EXPECT_GT(half, 0.5 * full) << i;
    EXPECT_LT(half, 0.51 * full) << i;
  }
  const CliRun table = run({"--model=llama", "--pp=2", "--vpp=1", "--ep=1", "--dp=1", "--tp=2",
                            "--layout-only"});
  EXPECT_NE(table.out.find("the rows are TP rank 0 of each stage"), std::string::npos);
  expect_rejected({"--model=llama", "--pp=2", "--vpp=1", "--ep=1", "--tp=3"},
                  "impossible world for llama: tp=3 does not divide dimension 1 (4096) of "
                  "decoder.layers.0.self_attention.linear_proj.weight (row-parallel) at full "
                  "size");
  expect_rejected({"--tp=0"}, "--tp=0: expected an integer from 1");
  // Checked at full size whatever the scale.
  expect_rejected({"--model=llama", "--pp=2", "--vpp=1", "--ep=1", "--tp=3", "--scale=64",
                   "--steps=0"},
                  "tp=3 does not divide");
}

TEST(Cli, HelpListsTheParallelOptions) {
  const CliRun r = run({"--help"});
  for (const char* option : {"--tp=N", "--pipeline-layout=", "--first-stage-layers=N",
                             "--last-stage-layers=N"}) {
    EXPECT_NE(r.out.find(option), std::string::npos) << option;
  }
}

TEST(Cli, MemoryBudgetTakesByteCountsWithUnits) {
  EXPECT_EQ(parse_byte_size("8GiB"), int64_t{8} << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("1.5GB"), int64_t{1500000000});
  EXPECT_EQ(parse_byte_size("1000000"), int64_t{1000000});
  EXPECT_EQ(parse_byte_size("64B"), int64_t{64});
  for (const char* bad : {"", "0", "GiB", "-1GiB", "8XB", "1e3", ".", "nan", "99999999TiB"}) {
    EXPECT_FALSE(parse_byte_size(bad).has_value()) << bad;
  }
  expect_rejected({"--memory-budget=lots"}, "--memory-budget=lots: expected a byte count");
  EXPECT_GE(default_memory_budget(), int64_t{1} << 20);
}

const std::vector<std::string> kTinyLlama{"--model=llama", "--scale=1024", "--pp=1", "--vpp=1",
                                          "--ep=1", "--dp=1", "--variant=pr6982", "--steps=1"};

TEST(Cli, TensorModeRefusesAWorldAboveTheMemoryBudgetBeforeBuildingIt) {
  const CliRun small = run(plus(kTinyLlama, {"--memory-budget=1KiB"}));
  EXPECT_EQ(small.status, 2) << small.err;
  EXPECT_TRUE(small.out.empty()) << small.out;
  EXPECT_NE(small.err.find("above --memory-budget=1.0 KiB"), std::string::npos) << small.err;
  const CliRun fits = run(plus(kTinyLlama, {"--memory-budget=1GiB"}));
  EXPECT_EQ(fits.status, 0) << fits.err;
  EXPECT_NE(fits.out.find("pr6982: 0 of 1 ranks fail construction"), std::string::npos);

  // The full-size seed world: far beyond any budget; refused at once, naming the rank, the
  // largest kinds of bytes and parameters, and a scale that fits.
  const CliRun full = run({"--scale=1", "--memory-budget=8GiB"});
  EXPECT_EQ(full.status, 2) << full.err;
  EXPECT_TRUE(full.out.empty());
  for (const char* part :
       {"shardcheck-sim: tensor mode would build ", " GiB of tensors for rank ",
        "of dsv4-flash at scale 1, above --memory-budget=8.0 GiB", "; largest kinds: ",
        "grad_buffer ", "; largest parameters: ", "(bf16, ", "Use a larger --scale (--scale=",
        " fits; ", "--layout-only (no tensors, any size)"}) {
    EXPECT_NE(full.err.find(part), std::string::npos) << part << "\n" << full.err;
  }
  // The suggested scale is the smallest power of two that fits the budget.
  const size_t at = full.err.find("(--scale=") + 9;
  const int64_t suggested = std::stoll(full.err.substr(at));
  ASSERT_GE(suggested, 2);
  const CliOptions o;
  auto refused_at = [&](int64_t scale) {
    auto model = load_model(o, scale);
    EXPECT_TRUE(std::holds_alternative<input::ModelInventory>(model));
    auto world = checked_world(o, std::get<input::ModelInventory>(model));
    EXPECT_TRUE(std::holds_alternative<input::WorldSizes>(world));
    return memory_budget_refusal(o, std::get<input::ModelInventory>(model),
                                 std::get<input::WorldSizes>(world), scale, int64_t{8} << 30)
        .has_value();
  };
  EXPECT_FALSE(refused_at(suggested));
  EXPECT_TRUE(refused_at(suggested / 2));
}

TEST(Cli, LayoutOnlyAllocatesNoTensorsAtFullSizeWhateverTheBudget) {
  const CliRun r = run({"--layout-only", "--scale=1", "--memory-budget=1KiB", "--json",
                        "--stats", "--variant=pr6982"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto parsed = nlohmann::json::parse(r.out);
  int64_t largest = 0;
  for (const auto& rank : parsed.at("ranks")) {
    int64_t total = 0;
    for (const char* side : {"accelerator", "host"}) {
      for (const auto& [kind, bytes] : rank.at("bytes").at(side).items()) {
        total += bytes.get<int64_t>();
      }
    }
    largest = std::max(largest, total);
  }
  // A rank of the full-size world would hold tens of GiB of tensors; this process never held
  // more than a few hundred MiB.
  EXPECT_GT(largest, int64_t{16} << 30);
  EXPECT_LT(parsed.at("stats").at("peak_rss_bytes").get<int64_t>(), int64_t{2} << 30);
}

}  // namespace
}  // namespace sc::app
