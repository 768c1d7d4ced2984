// Golden tests of the LibTorch port: the worked examples through the real buffer and
// DistributedOptimizer, Megatron's rebinding of parameters into the buffer, and the TypeError
// branch.
#include <gtest/gtest.h>

#include "model/shard.h"
#include "sim/port/device.h"
#include "sim/port/param_buffer.h"
#include "sim/rig/rank_rig.h"
#include "tests/support/devices.h"

namespace sc::rig {
namespace {

model::ParamSpec param(const std::string& name, std::vector<int64_t> shape,
                       model::DType dtype = model::DType::kBFloat16) {
  model::ParamSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.dtype = dtype;
  return p;
}


TEST(PortGolden, WorkedExampleRanksMatchTheTable) {
  model::CaseSpec c;
  c.params = {param("p0", {97}), param("p1", {103}), param("p2", {300})};
  c.dp = 4;
  // rank -> [(param, gbuf_local, param range)]
  const std::vector<std::vector<std::tuple<int, model::Range, model::Range>>> want = {
      {{2, {0, 160}, {0, 160}}},
      {{2, {0, 140}, {160, 300}}},
      {{1, {0, 103}, {0, 103}}, {0, {128, 160}, {0, 32}}},
      {{0, {0, 65}, {32, 97}}},
  };
  for (int r = 0; r < 4; ++r) {
    const RankObservation obs = run_rank(c, model::Instance::kDense, r, sut::upstream(), kCpu, 1);
    ASSERT_FALSE(obs.error) << *obs.error;
    ASSERT_EQ(obs.ranges.size(), 1u);
    const auto& pm = obs.ranges[0].buckets.at(0).param_map;
    ASSERT_EQ(pm.size(), want[r].size()) << "rank " << r;
    for (size_t i = 0; i < pm.size(); ++i) {
      EXPECT_EQ(pm[i].param, std::get<0>(want[r][i]));
      EXPECT_EQ(pm[i].gbuf_local, std::get<1>(want[r][i]));
      EXPECT_EQ(pm[i].param_range, std::get<2>(want[r][i]));
    }
  }
}

TEST(PortGolden, FiveOfEightRanksOwnOnlyPaddingAndGetNoShard) {
  model::CaseSpec c;
  for (int i = 0; i < 3; ++i) c.params.push_back(param("s" + std::to_string(i), {1}, model::DType::kFloat32));
  c.dp = 8;
  for (int r = 0; r < 8; ++r) {
    const RankObservation obs = run_rank(c, model::Instance::kDense, r, sut::upstream(), kCpu, 1);
    const size_t n = obs.groups.at(0).size();
    EXPECT_EQ(n, (r == 0 || r == 2 || r == 4) ? 1u : 0u) << "rank " << r;
  }
}

TEST(PortGolden, BufferRebindsParamsAsLeafViewsOfParamData) {
  std::vector<sut::ModelParam> params(2);
  params[0].name = "a";
  params[0].param = torch::arange(97, torch::kFloat).requires_grad_(true);
  params[1].name = "b";
  params[1].param = torch::arange(300, torch::kFloat).view({3, 100}).requires_grad_(true);
  sut::DdpConfig ddp;
  sut::ParamAndGradBuffer buffer(ddp, {torch::kFloat, torch::kFloat, false}, params, {0, 1}, 4, 0,
                                 kCpu);
  EXPECT_EQ(buffer.numel(), 512);
  for (const auto& mp : params) {
    EXPECT_TRUE(mp.param.is_leaf());
    EXPECT_TRUE(mp.param.requires_grad());
    EXPECT_TRUE(mp.param.is_alias_of(buffer.param_data()));
  }
  // b is placed first (reverse order) at 0, a at 320; values were copied in.
  EXPECT_EQ(params[1].param.data_ptr<float>(), buffer.param_data().data_ptr<float>());
  EXPECT_EQ(params[0].param.data_ptr<float>(), buffer.param_data().data_ptr<float>() + 320);
  EXPECT_EQ(buffer.param_data()[320 + 96].item<float>(), 96.0f);
  EXPECT_TRUE(params[0].main_grad.is_alias_of(buffer.grad_data()));
}

TEST(PortGolden, UnsupportedDtypeRaisesTheTypeErrorText) {
  model::CaseSpec c;
  c.params = {param("w", {10}, model::DType::kFloat64)};
  const RankObservation obs = run_rank(c, model::Instance::kDense, 0, sut::upstream(), kCpu, 1);
  ASSERT_TRUE(obs.error);
  EXPECT_EQ(obs.error_type, "TypeError");
  EXPECT_EQ(*obs.error,
            "Wrapped parameters must be one of torch.cuda.FloatTensor,  torch.cuda.HalfTensor, or "
            "torch.cuda.BFloat16Tensor. Received torch.cuda.DoubleTensor");
}

TEST(PortGolden, MegatronTypeStringTreatsTheAcceleratorAsCuda) {
  EXPECT_EQ(sut::megatron_type(torch::zeros({1}, torch::kBFloat16), kCpu),
            "torch.cuda.BFloat16Tensor");
  EXPECT_EQ(sut::megatron_type(torch::zeros({1}, torch::kHalf), kCpu), "torch.cuda.HalfTensor");
  EXPECT_EQ(sut::megatron_type(torch::zeros({1}), torch::Device(torch::kCUDA, 0)),
            "torch.FloatTensor");
}

TEST(PortGolden, MixedDtypeGroupInstallsFp32FirstAndRebuildsTheIndexMap) {
  model::CaseSpec c;
  c.params = {param("emb", {4000}), param("A.w", {3072}),
              param("A.alpha", {256}, model::DType::kFloat32), param("B.w", {2048})};
  const RankObservation obs =
      run_rank(c, model::Instance::kDense, 0, sut::fully_patched(), kCpu, 1);
  ASSERT_FALSE(obs.error);
  std::vector<int> order;
  for (const auto& t : obs.groups.at(0)) order.push_back(t.param);
  EXPECT_EQ(order, (std::vector<int>{2, 3, 1, 0}));
  EXPECT_EQ(obs.index_map.at(2), (std::pair<int, int>{0, 0}));
  EXPECT_EQ(obs.index_map.at(3), (std::pair<int, int>{0, 1}));
  EXPECT_EQ(obs.index_map.at(0), (std::pair<int, int>{0, 3}));
  // The MEG-02 mutant keeps the grad-buffer order: bf16 buffer first (B.w, A.w, emb), alpha last.
  const RankObservation stale =
      run_rank(c, model::Instance::kDense, 0, *sut::behaviour_by_name("MEG-02"), kCpu, 1);
  EXPECT_EQ(stale.index_map.at(2), (std::pair<int, int>{0, 3}));
}

TEST(PortGolden, OffloadSplitIsAGreedyPrefixTestedBeforeAdding) {
  // Installed [alpha 256, B.w 2048, A.w 3072, emb 4000], fraction 0.5: threshold 4688, so
  // alpha, B.w and A.w (running 5376) go to the host and emb stays on the accelerator.
  model::CaseSpec c;
  c.params = {param("emb", {4000}), param("A.w", {3072}),
              param("A.alpha", {256}, model::DType::kFloat32), param("B.w", {2048})};
  c.cpu_offload = true;
  c.offload_fraction = 0.5;
  const RankObservation obs =
      run_rank(c, model::Instance::kDense, 0, sut::fully_patched(), kCpu, 1);
  ASSERT_FALSE(obs.error);
  EXPECT_EQ(obs.offloaded_tensors, 3);
  c.offload_fraction = 0.0;
  EXPECT_EQ(run_rank(c, model::Instance::kDense, 0, sut::fully_patched(), kCpu, 1).offloaded_tensors, 0);
  c.offload_fraction = 1.0;
  EXPECT_EQ(run_rank(c, model::Instance::kDense, 0, sut::fully_patched(), kCpu, 1).offloaded_tensors, 4);
}

}  // namespace
}  // namespace sc::rig
