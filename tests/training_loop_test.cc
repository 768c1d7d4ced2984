// The training loop's view (model/training.h, sim/port/ddp_hooks.h): what a backward pass leaves
// in main_grad, predicted by the model from literal values and delivered by the port's DDP hook.
#include <gtest/gtest.h>

#include <vector>

#include "model/rounding.h"
#include "model/training.h"
#include "sim/port/behaviour.h"
#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

// 1 + 2^-8 is not a bf16 value: autograd delivers it rounded to the bf16 parameter's dtype.
TEST(TrainingModel, TheGradientArrivesInTheParametersDtype) {
  EXPECT_EQ(model::backward_grad(model::DType::kBFloat16, 1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(model::backward_grad(model::DType::kFloat32, 1.0f + 0x1p-8f), 1.0f + 0x1p-8f);
}

// Two passes add in the buffer's dtype: 1 + 2^-8 twice is 2 + 2^-7 in fp32 (exact); in a bf16
// buffer each pass arrives as 1, so the sum is 2.
TEST(TrainingModel, PassesAddUpInTheGradBuffersDtype) {
  model::CaseSpec c = test::one_param_case("w", {1}, model::DType::kBFloat16);
  const std::vector<std::vector<float>> two{{1.0f + 0x1p-8f}, {1.0f + 0x1p-8f}};
  EXPECT_EQ(model::main_grad_after(c, 0, two), std::vector<float>{2.0f});
  c.params[0].dtype = model::DType::kFloat32;
  EXPECT_EQ(model::main_grad_after(c, 0, two), std::vector<float>{2.0f + 0x1p-7f});
  // 256 + 1 in a bf16 buffer rounds back to 256 (8 bits of mantissa).
  c.params[0].dtype = model::DType::kBFloat16;
  EXPECT_EQ(model::main_grad_after(c, 0, {{256.0f}, {1.0f}}), std::vector<float>{256.0f});
  c.grad_reduce_in_fp32 = true;
  EXPECT_EQ(model::main_grad_after(c, 0, {{256.0f}, {1.0f}}), std::vector<float>{257.0f});
}

RankRig training_rig(const model::CaseSpec& c, const char* variant) {
  return RankRig(c, c.params[0].is_expert ? model::Instance::kExpert : model::Instance::kDense, 0,
                 *sut::behaviour_by_name(variant), torch::Device(torch::kCPU), /*seed=*/5,
                 StreamSchedule{}, /*training_loop=*/true);
}

// The port's DDP hook moves `.grad` into main_grad and drops it; zero_grad starts from zero.
TEST(TrainingPort, BackwardFillsMainGradAndZeroGradClearsIt) {
  const model::CaseSpec c = test::one_param_case("w", {3}, model::DType::kBFloat16);
  RankRig rig = training_rig(c, "patched");
  rig.backward({{1.0f, -2.0f, 0.25f}});
  const std::vector<ObservedGrad> twice = rig.backward({{1.0f, -2.0f, 0.25f}});
  ASSERT_EQ(twice.size(), 1u);
  EXPECT_TRUE(twice[0].requires_grad && twice[0].is_leaf && twice[0].grad_is_none);
  EXPECT_EQ(twice[0].main_grad, (std::vector<float>{2.0f, -4.0f, 0.5f}));
  rig.zero_grad(/*set_to_none=*/true);
  EXPECT_EQ(rig.backward({{3.0f, 0.0f, 1.0f}})[0].main_grad, (std::vector<float>{3.0f, 0.0f, 1.0f}));
}

// Mutant TRAIN-zero-skips-expert-buffers: an expert parameter's main_grad survives the zeroing.
TEST(TrainingPort, TheZeroGradMutantKeepsAnExpertParamsMainGrad) {
  model::CaseSpec c = test::one_param_case("e", {2}, model::DType::kFloat32);
  c.params[0].is_expert = true;
  RankRig rig = training_rig(c, "TRAIN-zero-skips-expert-buffers");
  rig.backward({{1.0f, 1.0f}});
  rig.zero_grad(/*set_to_none=*/true);
  EXPECT_EQ(rig.backward({{1.0f, 1.0f}})[0].main_grad, (std::vector<float>{2.0f, 2.0f}));
}

}  // namespace
}  // namespace sc::rig
