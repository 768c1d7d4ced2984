// Regression: port-fidelity finding P4 (FINDINGS.md). The port made each fp32 model parameter as
// a view of the host tensor its values came from (`host.view(shape).to(device, dtype)` returns
// that view when neither changes), where Megatron's parameters are tensors of their own
// (`torch.nn.Parameter`). Nothing observed the difference until the training-loop mutant
// TRAIN-seed-fix-detaches-param detached a parameter in place: LibTorch refuses `detach_()` on a
// view ("Can't detach views in-place"), so the port raised at construction where the real code
// constructs and silently stops the parameter's gradients.
#include <gtest/gtest.h>

#include "sim/port/behaviour.h"
#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"

namespace sc::rig {
namespace {

TEST(P4PortParamsWereViews, DetachingAnFp32ParamInPlaceConstructsAndStopsItsGradients) {
  const model::CaseSpec c = test::one_param_case("w", {2, 3}, model::DType::kFloat32);
  const auto mutant = sut::behaviour_by_name("TRAIN-seed-fix-detaches-param");
  ASSERT_TRUE(mutant);
  RankRig rig(c, model::Instance::kDense, 0, *mutant, torch::Device(torch::kCPU), /*seed=*/3,
              StreamSchedule{}, /*training_loop=*/true);
  ASSERT_FALSE(rig.construction().error) << *rig.construction().error;
  const std::vector<ObservedGrad> got = rig.backward({std::vector<float>(6, 0.5f)});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].requires_grad);
  EXPECT_EQ(got[0].main_grad, std::vector<float>(6, 0.0f)) << "no gradient reaches main_grad";
}

}  // namespace
}  // namespace sc::rig
