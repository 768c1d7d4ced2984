// Deterministic tests of the port's DistributedOptimizer paths outside the step:
// reload_model_params (Megatron's test_optimizer_reload_model_params, exact) and zero_grad.
#include <gtest/gtest.h>

#include "sim/port/distrib_optimizer.h"
#include "sim/port/hybrid_optimizer.h"

namespace sc::sut {
namespace {

struct Rig {
  std::vector<ModelParam> params;
  std::unique_ptr<ParamAndGradBuffer> buffer;
  TensorAttrs attrs;
  std::unique_ptr<DistributedOptimizer> dist;

  explicit Rig(bool precision_aware) {
    params.resize(1);
    params[0].name = "w";
    params[0].param = torch::ones({100}, torch::kBFloat16).requires_grad_(true);
    buffer = std::make_unique<ParamAndGradBuffer>(DdpConfig{}, BufferKey{torch::kBFloat16, torch::kBFloat16, false},
                                                  params, std::vector<int>{0}, 2, 0,
                                                  torch::Device(torch::kCPU));
    auto inner = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{params[0].param});
    OptimizerConfig config;
    config.use_precision_aware_optimizer_no_fp8_or_ds_fp8 = precision_aware;
    dist = std::make_unique<DistributedOptimizer>(std::move(inner), config, params,
                                                  std::vector<const ParamAndGradBuffer*>{buffer.get()},
                                                  fully_patched(), torch::Device(torch::kCPU),
                                                  &attrs);
  }
};

TEST(DistributedOptimizer, MainParamsFollowModelParamsOnlyAfterReload) {
  Rig r(/*precision_aware=*/false);
  const torch::Tensor main = r.dist->shard_fp32_from_float16_groups()[0][0];
  EXPECT_TRUE(torch::equal(main, torch::ones({main.numel()})));
  {
    torch::NoGradGuard no_grad;
    r.params[0].param.fill_(2.0);
  }
  EXPECT_TRUE(torch::equal(main, torch::ones({main.numel()})));
  r.dist->reload_model_params();
  EXPECT_TRUE(torch::equal(main, torch::full({main.numel()}, 2.0f)));
}

TEST(DistributedOptimizer, ZeroGradClearsShardGradsOrDecoupledGrads) {
  Rig plain(false);
  plain.params[0].main_grad.fill_(1.0);
  plain.dist->copy_model_grads_to_main_grads();
  const torch::Tensor main = plain.dist->shard_fp32_from_float16_groups()[0][0];
  ASSERT_TRUE(main.grad().defined());
  plain.dist->zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(torch::equal(main.grad(), torch::zeros_like(main)));
  plain.dist->zero_grad(/*set_to_none=*/true);
  EXPECT_FALSE(main.grad().defined());

  Rig pa(true);
  pa.params[0].main_grad.fill_(1.0);
  pa.dist->copy_model_grads_to_main_grads();
  const torch::Tensor shard = pa.dist->shard_float16_groups()[0][0];
  ASSERT_TRUE(pa.attrs.decoupled_grad(shard).defined());
  EXPECT_FALSE(shard.grad().defined());  // precision-aware sets decoupled_grad only
  pa.dist->zero_grad(true);
  EXPECT_TRUE(pa.attrs.has_decoupled_grad(shard));  // the attribute stays, holding None
  EXPECT_FALSE(pa.attrs.decoupled_grad(shard).defined());
}

}  // namespace
}  // namespace sc::sut
