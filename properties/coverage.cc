#include "properties/coverage.h"

#include <algorithm>

#include <rapidcheck.h>

#include "model/layout.h"
#include "model/shard.h"
#include "properties/checks.h"

namespace sc::props {

namespace {

// Class names; coverage_classes() and the coverage test refer to them by these constants.
const char* const kFp32In16Bit = "fp32 parameter inside a 16-bit model";
const char* const kStraddles = "parameter straddles a rank boundary";
const char* const kPaddingOnly = "checked rank owns only padding";
const char* const kEmptyGroup = "empty group on a checked rank";
const char* const kSeveralBuckets = "several buckets in a buffer";
const char* const kSharedEmbedding = "shared embedding";
const char* const kZeroSize = "zero-size parameter";
const char* const kDpOdd = "dp odd (> 1)";
const char* const kDpPrime = "dp prime";
const char* const kDpAboveNumel = "dp larger than the element count";
const char* const kFraction0 = "offload fraction 0";
const char* const kFraction1 = "offload fraction 1";
const char* const kFractionInterior = "offload fraction interior";
const char* const kOffloadOff = "offload off";
const char* const kPrecisionAwareOn = "precision-aware on";
const char* const kPrecisionAwareOff = "precision-aware off";
const char* const kOverlapOn = "offload with overlap on";
const char* const kOverlapOff = "offload with overlap off";

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

// True when some parameter's range in a bucket crosses the boundary between two ranks' shards.
bool straddles_rank_boundary(const model::BufferLayout& l) {
  for (const model::ParamPlacement& pl : l.placements) {
    const model::Range bucket = l.buckets[static_cast<size_t>(pl.bucket)];
    const int64_t shard = bucket.size() / l.dp;
    if (shard == 0) continue;
    // The first rank boundary after the parameter's start.
    const int64_t next = bucket.start + ((pl.range.start - bucket.start) / shard + 1) * shard;
    if (next < pl.range.end) return true;
  }
  return false;
}

}  // namespace

const std::vector<std::string>& coverage_class_names() {
  static const std::vector<std::string> kNames = {
      kFp32In16Bit,    kStraddles,   kPaddingOnly,    kEmptyGroup,       kSeveralBuckets,
      kSharedEmbedding, kZeroSize,   kDpOdd,          kDpPrime,          kDpAboveNumel,
      kFraction0,      kFraction1,   kFractionInterior, kOffloadOff,     kPrecisionAwareOn,
      kPrecisionAwareOff, kOverlapOn, kOverlapOff};
  return kNames;
}

std::vector<std::string> coverage_classes(const model::CaseSpec& spec) {
  bool has16 = false, has32 = false, zero_size = false, shared = false;
  for (const model::ParamSpec& p : spec.params) {
    has16 |= model::is_float16(p.dtype);
    has32 |= p.dtype == model::DType::kFloat32;
    zero_size |= p.numel() == 0;
    shared |= p.shared_embedding;
  }
  bool straddles = false, padding_only = false, empty_group = false, several_buckets = false;
  bool dp_odd = false, dp_prime = false, dp_above_numel = false;
  // model::validate rejects zero-size parameters, and the layout asserts on them.
  if (!zero_size) {
    const auto layouts = model::full_param_layout(spec);
    for (const model::BufferLayout& l : layouts) {
      straddles |= straddles_rank_boundary(l);
      several_buckets |= l.buckets.size() > 1;
    }
    for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
      if (!model::instance_present(spec, inst)) continue;
      const int64_t dp = model::instance_dp(spec, inst);
      int64_t numel = 0;
      for (const model::ParamSpec& p : spec.params) {
        if (p.is_expert == (inst == model::Instance::kExpert)) numel += p.numel();
      }
      dp_odd |= dp > 1 && dp % 2 == 1;
      dp_prime |= is_prime(dp);
      dp_above_numel |= dp > numel;
      for (int64_t r : ranks_to_check(spec, layouts, inst)) {
        const model::RankPlan plan = model::plan_rank(spec, layouts, inst, r);
        bool owns = false;
        for (const model::GroupPlan& g : plan.groups) {
          owns |= !g.installed.empty();
          empty_group |= g.installed.empty();
        }
        padding_only |= !owns;
      }
    }
  }
  const bool fraction_interior = spec.offload_fraction > 0.0 && spec.offload_fraction < 1.0;
  const std::vector<std::pair<const char*, bool>> hits = {
      {kFp32In16Bit, has16 && has32},
      {kStraddles, straddles},
      {kPaddingOnly, padding_only},
      {kEmptyGroup, empty_group},
      {kSeveralBuckets, several_buckets},
      {kSharedEmbedding, shared},
      {kZeroSize, zero_size},
      {kDpOdd, dp_odd},
      {kDpPrime, dp_prime},
      {kDpAboveNumel, dp_above_numel},
      {kFraction0, spec.cpu_offload && spec.offload_fraction == 0.0},
      {kFraction1, spec.cpu_offload && spec.offload_fraction == 1.0},
      {kFractionInterior, spec.cpu_offload && fraction_interior},
      {kOffloadOff, !spec.cpu_offload},
      {kPrecisionAwareOn, spec.precision_aware},
      {kPrecisionAwareOff, !spec.precision_aware},
      {kOverlapOn, spec.cpu_offload && spec.overlap_cpu_optimizer_d2h_h2d},
      {kOverlapOff, spec.cpu_offload && !spec.overlap_cpu_optimizer_d2h_h2d},
  };
  std::vector<std::string> out;
  for (const auto& [name, hit] : hits) {
    if (hit) out.push_back(name);
  }
  return out;
}

void tag_coverage(const model::CaseSpec& spec) {
  const std::vector<std::string> hit = coverage_classes(spec);
  for (const std::string& name : coverage_class_names()) {
    RC_CLASSIFY(std::find(hit.begin(), hit.end(), name) != hit.end(), name);
  }
}

}  // namespace sc::props
