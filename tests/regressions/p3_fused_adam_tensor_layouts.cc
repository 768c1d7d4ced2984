// Regression: port-fidelity finding P3 (FINDINGS.md). Transformer Engine's multi-tensor apply
// checks every tensor of every list (parameters, grads, moments) and raises "A tensor was not
// contiguous." unless it is dense in the row-major or a channels-last memory format. The port
// checked only the parameter, and only for row-major: it made a strided grad contiguous and
// stepped, and it refused a channels-last parameter that TE steps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/port/behaviour.h"
#include "sim/port/fused_adam.h"
#include "sim/port/torch_pch.h"

namespace sc {
namespace {

// One FusedAdam step of `param` with `grad` (fp32, one group, upstream's behaviour).
void fused_adam_step(const torch::Tensor& param, const torch::Tensor& grad) {
  param.mutable_grad() = grad;
  std::vector<torch::optim::OptimizerParamGroup> groups{
      torch::optim::OptimizerParamGroup(std::vector<torch::Tensor>{param})};
  sut::FusedAdam opt(groups, sut::FusedAdamOptions().lr(0.01).weight_decay(0.1), nullptr,
                     sut::FusedAdamFlags{}, sut::upstream());
  opt.step();
}

// Transformer Engine's multi-tensor apply refuses a strided grad as it refuses a strided
// parameter; the port once made the grad contiguous and stepped.
TEST(P3FusedAdamLayouts, AStridedGradIsRefusedAndNothingChanges) {
  const torch::Tensor p = torch::arange(6, torch::kFloat).reshape({2, 3}).requires_grad_(true);
  const torch::Tensor before = p.detach().clone();
  const torch::Tensor g = torch::ones({3, 2}).t();
  try {
    fused_adam_step(p, g);
    FAIL() << "a strided grad was stepped";
  } catch (const c10::Error& e) {
    EXPECT_NE(e.msg().find("A tensor was not contiguous."), std::string::npos) << e.msg();
  }
  EXPECT_TRUE(torch::equal(p.detach(), before));
}

// Multi-tensor apply takes channels-last tensors as dense; the port once refused them. With
// parameter and grad in that format the step equals the row-major one element by element.
TEST(P3FusedAdamLayouts, ChannelsLastStepsLikeRowMajor) {
  const torch::Tensor values = torch::linspace(-1, 1, 2 * 3 * 2 * 2).reshape({2, 3, 2, 2});
  const torch::Tensor grad = torch::cos(values * 7);
  const torch::Tensor row_major = values.clone().requires_grad_(true);
  const torch::Tensor cl =
      values.contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_(true);
  ASSERT_FALSE(cl.is_contiguous());
  fused_adam_step(row_major, grad.clone());
  fused_adam_step(cl, grad.contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(torch::equal(cl.detach().contiguous(), row_major.detach()));
}

}  // namespace
}  // namespace sc
