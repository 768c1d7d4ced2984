// Coverage classes: the classifier recognises each edge on literal cases, and the case generator
// hits every reachable class at its stated minimum rate (README "Coverage classes") over 1000
// cases drawn exactly as the properties draw them, with a fixed RapidCheck seed. Model only: no
// tensor is built.
#include <gtest/gtest.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>

#include <rapidcheck.h>

#include "model/spec.h"
#include "properties/coverage.h"
#include "properties/run.h"
#include "properties/gen/case_gen.h"
#include "tests/support/cases.h"

namespace sc::props {
namespace {

bool has(const model::CaseSpec& c, const std::string& cls) {
  const auto hit = coverage_classes(c);
  return std::find(hit.begin(), hit.end(), cls) != hit.end();
}

model::ParamSpec param(const std::string& name, int64_t numel, model::DType d, int group = 0) {
  model::ParamSpec p;
  p.name = name;
  p.shape = {numel};
  p.dtype = d;
  p.group = group;
  return p;
}

TEST(CoverageClasses, EveryNameIsKnownAndUnique) {
  auto names = coverage_class_names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
  model::CaseSpec c = test::one_param_case("w", {10}, model::DType::kBFloat16);
  for (const std::string& cls : coverage_classes(c)) {
    EXPECT_NE(std::find(names.begin(), names.end(), cls), names.end()) << cls;
  }
}

TEST(CoverageClasses, OneTinyParameterAtDp4) {
  // 10 elements padded to a 128-element bucket: rank 0 owns them all, ranks 1 to 3 padding.
  model::CaseSpec c = test::one_param_case("w", {10}, model::DType::kBFloat16);
  c.dp = 4;
  EXPECT_TRUE(has(c, "checked rank owns only padding"));
  EXPECT_TRUE(has(c, "empty group on a checked rank"));
  EXPECT_FALSE(has(c, "parameter straddles a rank boundary"));
  EXPECT_FALSE(has(c, "dp odd (> 1)"));
  EXPECT_FALSE(has(c, "dp prime"));
  EXPECT_FALSE(has(c, "dp larger than the element count"));
  EXPECT_FALSE(has(c, "fp32 parameter inside a 16-bit model"));
  EXPECT_TRUE(has(c, "offload off"));
  EXPECT_TRUE(has(c, "precision-aware off"));
  c.dp = 1;
  EXPECT_FALSE(has(c, "checked rank owns only padding"));
  EXPECT_FALSE(has(c, "empty group on a checked rank"));
  c.dp = 11;
  EXPECT_TRUE(has(c, "dp odd (> 1)"));
  EXPECT_TRUE(has(c, "dp prime"));
  EXPECT_TRUE(has(c, "dp larger than the element count"));
}

TEST(CoverageClasses, StraddleBucketsGroupsAndDtypes) {
  // 300 bf16 elements at dp 2: the bucket is padded to 384, each rank's shard is 192 elements.
  model::CaseSpec c = test::one_param_case("w", {300}, model::DType::kBFloat16);
  c.dp = 2;
  EXPECT_TRUE(has(c, "parameter straddles a rank boundary"));
  EXPECT_FALSE(has(c, "several buckets in a buffer"));
  c.params.push_back(param("v", 300, model::DType::kBFloat16, 1));
  c.bucket_size = 100;  // a bucket closes after each parameter
  EXPECT_TRUE(has(c, "several buckets in a buffer"));
  EXPECT_FALSE(has(c, "empty group on a checked rank"));
  c.params.push_back(param("alpha", 3, model::DType::kFloat32));
  EXPECT_TRUE(has(c, "fp32 parameter inside a 16-bit model"));
  c.params[1].shared_embedding = true;
  EXPECT_TRUE(has(c, "shared embedding"));
}

TEST(CoverageClasses, OffloadFractionsAndPrecisionAware) {
  model::CaseSpec c = test::one_param_case("w", {10}, model::DType::kBFloat16);
  c.cpu_offload = true;
  c.precision_aware = true;
  c.offload_fraction = 0.0;
  EXPECT_TRUE(has(c, "offload fraction 0"));
  EXPECT_TRUE(has(c, "precision-aware on"));
  EXPECT_FALSE(has(c, "offload off"));
  c.offload_fraction = 1.0;
  EXPECT_TRUE(has(c, "offload fraction 1"));
  EXPECT_FALSE(has(c, "offload fraction 0"));
  c.offload_fraction = 0.25;
  EXPECT_TRUE(has(c, "offload fraction interior"));
  EXPECT_TRUE(has(c, "offload with overlap on"));
  c.overlap_cpu_optimizer_d2h_h2d = false;
  EXPECT_TRUE(has(c, "offload with overlap off"));
  EXPECT_FALSE(has(c, "offload with overlap on"));
  c.cpu_offload = false;  // the fraction and the overlap mean nothing without offload
  EXPECT_FALSE(has(c, "offload fraction interior"));
  EXPECT_FALSE(has(c, "offload with overlap off"));
}

TEST(CoverageClasses, ZeroSizeParameterIsClassifiedAndRejectedByTheModel) {
  // Megatron lays a zero-size parameter out at an aligned start and no rank ever owns a piece
  // of it; the model's CaseSpec excludes it (validate), so the generator never draws one.
  model::CaseSpec c = test::one_param_case("w", {0}, model::DType::kBFloat16);
  EXPECT_TRUE(has(c, "zero-size parameter"));
  ASSERT_TRUE(model::validate(c));
  EXPECT_NE(model::validate(c)->find("zero elements"), std::string::npos);
}

// Minimum share of 1000 generated cases per class (README "Coverage classes"), measured rates
// in the comment. The zero-size class is unreachable by construction (above).
const std::map<std::string, double> kMinimumRate = {
    {"fp32 parameter inside a 16-bit model", 0.30},  // measured 0.63
    {"parameter straddles a rank boundary", 0.40},   // 0.81
    {"checked rank owns only padding", 0.30},        // 0.66
    {"empty group on a checked rank", 0.40},         // 0.84
    {"several buckets in a buffer", 0.08},           // 0.17
    {"shared embedding", 0.15},                      // 0.32
    {"zero-size parameter", 0.0},                    // unreachable
    {"dp odd (> 1)", 0.30},                          // 0.70
    {"dp prime", 0.30},                              // 0.73
    {"dp larger than the element count", 0.05},      // 0.13
    {"offload fraction 0", 0.05},                    // 0.10
    {"offload fraction 1", 0.10},                    // 0.21
    {"offload fraction interior", 0.10},             // 0.20
    {"offload off", 0.25},                           // 0.49
    {"precision-aware on", 0.25},                    // 0.51
    {"precision-aware off", 0.25},                   // 0.49
    {"offload with overlap on", 0.10},               // 0.25
    {"offload with overlap off", 0.10},              // 0.25
};

TEST(CoverageClasses, TheGeneratorHitsEveryClassAtItsMinimumRate) {
  constexpr int kCases = 1000;
  std::map<std::string, int> hits;
  int cases = 0;
  RunOptions options;
  options.seed = 7;
  options.max_success = kCases;
  const RunOutcome result = run_property(
      [&] {
        const model::CaseSpec c = *gen::case_spec();
        ++cases;
        for (const std::string& cls : coverage_classes(c)) ++hits[cls];
      },
      options);
  ASSERT_EQ(result.kind, RunOutcome::Kind::kPassed) << result.report;
  ASSERT_EQ(cases, kCases);
  ASSERT_EQ(kMinimumRate.size(), coverage_class_names().size());
  for (const std::string& cls : coverage_class_names()) {
    const double rate = static_cast<double>(hits[cls]) / kCases;
    std::cout << std::left << std::setw(40) << cls << std::fixed << std::setprecision(3) << rate
              << "\n";
    ASSERT_TRUE(kMinimumRate.count(cls)) << cls;
    EXPECT_GE(rate, kMinimumRate.at(cls)) << cls;
    if (kMinimumRate.at(cls) == 0.0) {
      EXPECT_EQ(hits[cls], 0) << cls;
    }
  }
}

}  // namespace
}  // namespace sc::props
