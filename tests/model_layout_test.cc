// Golden tests of the reference model: the padding rules of Megatron's test_param_layout.py and
// test_param_and_grad_buffer.py, and the worked examples of the specification (section 1).
#include <gtest/gtest.h>

#include "model/layout.h"
#include "model/offload_plan.h"
#include "model/shard.h"

namespace sc::model {
namespace {

ParamSpec param(const std::string& name, std::vector<int64_t> shape, DType dtype = DType::kBFloat16) {
  ParamSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.dtype = dtype;
  return p;
}

TEST(ModelLayout, PadParamStartRoundsUpTo64Elements) {
  EXPECT_EQ(pad_param_start(0), 0);
  EXPECT_EQ(pad_param_start(1), 64);
  EXPECT_EQ(pad_param_start(63), 64);
  EXPECT_EQ(pad_param_start(64), 64);
  EXPECT_EQ(pad_param_start(65), 128);
}

TEST(ModelLayout, BucketEndDivisorIsLcmNotProduct) {
  for (int dp : {1, 2, 4, 8, 16, 32, 64, 128}) EXPECT_EQ(bucket_end_divisor(dp, false), 128) << dp;
  EXPECT_EQ(bucket_end_divisor(3, false), 384);
  EXPECT_EQ(bucket_end_divisor(6, false), 384);
  EXPECT_EQ(bucket_end_divisor(256, false), 256);
  EXPECT_EQ(bucket_end_divisor(3, true), 196608);
  EXPECT_EQ(bucket_end_divisor(1, true), 65536);
}

TEST(ModelLayout, WorkedExampleThreeParamsDp4) {
  CaseSpec c;
  c.params = {param("p0", {97}), param("p1", {103}), param("p2", {300})};
  c.dp = 4;
  const auto ls = full_param_layout(c);
  ASSERT_EQ(ls.size(), 1u);
  const BufferLayout& l = ls[0];
  ASSERT_EQ(l.placements.size(), 3u);
  EXPECT_EQ(l.placements[0].param, 2);
  EXPECT_EQ(l.placements[0].range, (Range{0, 300}));
  EXPECT_EQ(l.placements[1].range, (Range{320, 423}));
  EXPECT_EQ(l.placements[2].range, (Range{448, 545}));
  EXPECT_EQ(l.buckets, (std::vector<Range>{{0, 640}}));
  EXPECT_EQ(l.bucket_numel_unpadded, (std::vector<int64_t>{545}));

  // Rank table of specification section 1.5: param -> (gbuf_local, param range).
  struct Entry { int param; Range local, piece; };
  const std::vector<std::vector<Entry>> want = {
      {{2, {0, 160}, {0, 160}}},
      {{2, {0, 140}, {160, 300}}},
      {{1, {0, 103}, {0, 103}}, {0, {128, 160}, {0, 32}}},
      {{0, {0, 65}, {32, 97}}},
  };
  for (int r = 0; r < 4; ++r) {
    const BufferRanges br = buffer_ranges(l, r);
    ASSERT_EQ(br.buckets.size(), 1u);
    EXPECT_EQ(br.buckets[0].world, (Range{160 * r, 160 * (r + 1)}));
    const auto& pm = br.buckets[0].param_map;
    ASSERT_EQ(pm.size(), want[r].size()) << "rank " << r;
    for (size_t i = 0; i < pm.size(); ++i) {
      EXPECT_EQ(pm[i].param, want[r][i].param) << "rank " << r;
      EXPECT_EQ(pm[i].gbuf_local, want[r][i].local) << "rank " << r;
      EXPECT_EQ(pm[i].param_range, want[r][i].piece) << "rank " << r;
      EXPECT_EQ(pm[i].gbuf_world, pm[i].gbuf_local.normalize(160 * r + pm[i].gbuf_local.start));
      EXPECT_EQ(pm[i].gbuf_world_in_bucket, pm[i].gbuf_world);  // bucket offset 0
    }
  }
}

TEST(ModelLayout, WorkedExampleBucketSize8000Dp2) {
  CaseSpec c;
  c.params = {param("a", {5000}), param("b", {5000}), param("c", {5000})};
  c.dp = 2;
  c.bucket_size = 8000;
  const BufferLayout l = full_param_layout(c)[0];
  EXPECT_EQ(l.placements[0].range, (Range{0, 5000}));
  EXPECT_EQ(l.placements[1].range, (Range{5056, 10056}));
  EXPECT_EQ(l.placements[2].range, (Range{10112, 15112}));
  EXPECT_EQ(l.placements[2].bucket, 1);
  EXPECT_EQ(l.buckets, (std::vector<Range>{{0, 10112}, {10112, 15232}}));
  EXPECT_EQ(l.bucket_numel_unpadded, (std::vector<int64_t>{10056, 5000}));
  // In bucket 1, rank 1's world range is offset by the bucket start.
  const BufferRanges br = buffer_ranges(l, 1);
  EXPECT_EQ(br.buckets[1].world, (Range{10112 + 2560, 15232}));  // 5120 elements, 2560 each
  ASSERT_EQ(br.buckets[1].param_map.size(), 1u);
  EXPECT_EQ(br.buckets[1].param_map[0].gbuf_world_in_bucket, (Range{2560, 5000}));
  EXPECT_EQ(br.buckets[1].param_map[0].param_range, (Range{2560, 5000}));
}

TEST(ModelLayout, WorkedExampleFiveRanksOwnOnlyPadding) {
  CaseSpec c;
  for (int i = 0; i < 3; ++i) c.params.push_back(param("s" + std::to_string(i), {1}, DType::kFloat32));
  c.dp = 8;
  const auto ls = full_param_layout(c);
  EXPECT_EQ(ls[0].buckets, (std::vector<Range>{{0, 256}}));
  std::vector<int> owning;
  for (int r = 0; r < 8; ++r) {
    const RankPlan plan = plan_rank(c, ls, Instance::kDense, r);
    size_t n = 0;
    for (const auto& g : plan.groups) n += g.installed.size();
    if (n > 0) owning.push_back(r);
  }
  EXPECT_EQ(owning, (std::vector<int>{0, 2, 4}));
  c.cpu_offload = true;
  EXPECT_EQ(upstream_failing_ranks(c, ls, Instance::kDense), (std::vector<int64_t>{0, 2, 4}));
}

TEST(ModelLayout, DefaultLayoutHasNoPadding) {
  CaseSpec c;
  c.params = {param("big", {100, 100}), param("small", {50, 50})};
  const auto buffers = group_params_for_buffers(c);
  const BufferLayout l = default_buffer_layout(c, buffers[0]);
  EXPECT_EQ(l.placements[0].param, 1);
  EXPECT_EQ(l.placements[0].range, (Range{0, 2500}));
  EXPECT_EQ(l.placements[1].range, (Range{2500, 12500}));
  EXPECT_EQ(l.numel(), 12500);
}

TEST(ModelLayout, BuffersGroupByDtypeGradDtypeAndExpert) {
  CaseSpec c;
  c.params = {param("emb", {8}), param("alpha", {4}, DType::kFloat32), param("w", {8}),
              param("e", {8})};
  c.params[3].is_expert = true;
  c.dp = 3;
  c.expert_dp = 256;
  auto bs = group_params_for_buffers(c);
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[0].params, (std::vector<int>{0, 2}));
  EXPECT_EQ(bs[1].params, (std::vector<int>{1}));
  EXPECT_EQ(bs[2].params, (std::vector<int>{3}));
  const auto ls = full_param_layout(c);
  EXPECT_EQ(ls[0].numel(), 384);  // dense dp 3 -> lcm 384
  EXPECT_EQ(ls[2].numel(), 256);  // expert dp 256 -> 256
  c.grad_reduce_in_fp32 = true;
  bs = group_params_for_buffers(c);
  EXPECT_EQ(bs[0].key.grad_dtype, DType::kFloat32);
  EXPECT_EQ(bs[0].key.param_dtype, DType::kBFloat16);
}

TEST(ModelLayout, SharedEmbeddingGetsItsOwnBucketWithPreSplit) {
  CaseSpec c;
  c.params = {param("emb", {100}), param("w1", {30}), param("w2", {10})};
  c.params[0].shared_embedding = true;
  c.dp = 2;
  const BufferLayout l = full_param_layout(c)[0];
  // Reverse order: w2 at 0, w1 at 64; then emb pre-splits at start 128 (64-padded end).
  EXPECT_EQ(l.placements[0].range, (Range{0, 10}));
  EXPECT_EQ(l.placements[1].range, (Range{64, 94}));
  EXPECT_EQ(l.bucket_numel_unpadded[0], 128);  // includes the last 64-pad gap
  EXPECT_EQ(l.buckets[0], (Range{0, 128}));
  EXPECT_EQ(l.placements[2].range, (Range{128, 228}));
  EXPECT_EQ(l.placements[2].bucket, 1);
  EXPECT_EQ(l.buckets[1], (Range{128, 256}));
}

// test_bucket_sizes of test_param_and_grad_buffer.py, one configuration worked by hand:
// 10 layers of 95x95 bf16 weights, bucket_size 18000, dp 2: two weights per bucket.
TEST(ModelLayout, BucketSizesFollowTheCloseRule) {
  CaseSpec c;
  for (int i = 0; i < 10; ++i) c.params.push_back(param("w" + std::to_string(i), {95, 95}));
  c.dp = 2;
  c.bucket_size = 18000;
  const BufferLayout l = full_param_layout(c)[0];
  ASSERT_EQ(l.buckets.size(), 5u);
  for (size_t b = 0; b < 5; ++b) {
    // 9025 at 0, next at 9088 ending 18113 >= 18000: bucket unpadded 18113, padded to 18176.
    EXPECT_EQ(l.bucket_numel_unpadded[b], 18113) << b;
    EXPECT_EQ(l.buckets[b], (Range{18176 * static_cast<int64_t>(b), 18176 * static_cast<int64_t>(b + 1)}));
  }
}

TEST(ModelShardPlan, InstalledOrderPutsFp32ShardsFirst) {
  CaseSpec c;
  c.params = {param("emb", {4000}), param("A.w", {3072}), param("A.alpha", {256}, DType::kFloat32),
              param("B.w", {2048})};
  c.dp = 1;
  const auto ls = full_param_layout(c);
  const RankPlan plan = plan_rank(c, ls, Instance::kDense, 0);
  ASSERT_EQ(plan.groups.size(), 1u);
  std::vector<int> order;
  for (const auto& e : plan.groups[0].installed) order.push_back(e.param);
  EXPECT_EQ(order, (std::vector<int>{2, 3, 1, 0}));  // alpha, B.w, A.w, emb
  EXPECT_EQ(plan.index_map.at(2), (std::pair<int, int>{0, 0}));
  EXPECT_EQ(plan.index_map.at(0), (std::pair<int, int>{0, 3}));
  // Not precision-aware: 16-bit pieces become fresh fp32 main params; fp32 pieces alias.
  EXPECT_EQ(plan.groups[0].installed[0].kind, ShardKind::kFp32View);
  EXPECT_TRUE(plan.groups[0].installed[0].aliases_model);
  EXPECT_EQ(plan.groups[0].installed[1].kind, ShardKind::kFp32MainCopy);
  EXPECT_FALSE(plan.groups[0].installed[1].aliases_model);
  EXPECT_TRUE(plan.groups[0].installed[1].fresh_fp32_main);
  c.precision_aware = true;
  const RankPlan pa = plan_rank(c, ls, Instance::kDense, 0);
  EXPECT_EQ(pa.groups[0].installed[1].kind, ShardKind::kFloat16View);
  EXPECT_EQ(pa.groups[0].installed[1].dtype, DType::kBFloat16);
  EXPECT_TRUE(pa.groups[0].installed[1].aliases_model);
}

TEST(ModelSpec, ValidateNamesTheFirstViolation) {
  CaseSpec c;
  c.params = {param("p", {3})};
  EXPECT_FALSE(validate(c));
  c.dp = 0;
  EXPECT_EQ(validate(c).value_or(""), "data-parallel size must be at least 1, got 0");
  c.dp = 1;
  c.offload_fraction = 1.5;
  EXPECT_EQ(validate(c).value_or(""), "offload fraction must lie in [0, 1], got 1.5");
  c.offload_fraction = 1;
  c.params[0].shape = {0, 4};
  EXPECT_EQ(validate(c).value_or(""), "parameter 'p' has zero elements");
}

// With overlap, upstream steps one host AdamW per host tensor; proposal S1
// (patches/proposals/S1-hdo-host-optimizers-by-size.patch) lets consecutive host tensors of a
// group share one until it holds min_numel elements, and starts afresh in each group: its
// build_cpu_optimizer_list worked by hand on two groups of 10, 5, 20 and 0, 7 elements at 12.
TEST(OffloadPlanModel, HostOptimizersPerTensorUpstreamAndByMinNumelUnderS1) {
  const std::vector<std::vector<HdoTensor>> groups = {{{10}, {5}, {20}}, {{0}, {7}}};
  auto indices = [&](std::optional<int64_t> min_numel) {
    HdoConfig config;
    config.host_min_numel = min_numel;
    const OffloadPlan plan = plan_offload(groups, config);
    std::vector<int> out;
    for (const auto& g : plan.placements) {
      for (const auto& p : g) out.push_back(p.cpu_optimizer);
    }
    out.push_back(plan.num_cpu_optimizers);
    return out;
  };
  EXPECT_EQ(indices(std::nullopt), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(indices(12), (std::vector<int>{0, 0, 1, 2, 2, 3}));  // 10+5, 20, then 0+7
  EXPECT_EQ(indices(1), (std::vector<int>{0, 1, 2, 3, 3, 4}));   // the empty tensor shares
  EXPECT_EQ(indices(int64_t{1} << 22), (std::vector<int>{0, 0, 0, 1, 1, 2}));
}

}  // namespace
}  // namespace sc::model
