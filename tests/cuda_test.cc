// Tests that need a GPU: the project's FusedAdam kernel on CUDA tensors against the CPU kernel,
// bit for bit, and the numerical property with the accelerator on CUDA. They skip, with the
// reason, on machines without one.
#include <gtest/gtest.h>

#include <rapidcheck.h>

#include "properties/registry.h"
#include "properties/run.h"
#include "sim/rig/rng.h"
#include "sim/port/fused_adam.h"
#include "tests/support/device_guard.h"

namespace sc {
namespace {

TEST(FusedAdamKernel, MatchesTheCpuKernelBitForBit_CUDA) {
  SC_REQUIRE_CUDA();
  rig::SplitMix64 rng(17);
  // Sizes around the kernel's chunk of 4096 and more tensors than one launch holds (64), with
  // zero-size tensors in the middle and at the end (PT-01).
  std::vector<int64_t> sizes{1, 7, 4095, 4096, 4097, 0, 10000};
  for (int k = 0; k < 60; ++k) sizes.push_back(1 + static_cast<int64_t>(rng.below(300)));
  sizes.push_back(0);
  std::vector<torch::Tensor> cpu, gpu;
  for (int64_t n : sizes) {
    std::vector<float> v(n);
    for (float& x : v) x = rng.symmetric_unit();
    cpu.push_back(torch::tensor(v).requires_grad_(true));
    gpu.push_back(cpu.back().detach().to(torch::kCUDA).requires_grad_(true));
  }
  sut::FusedAdamOptions o;
  o.lr(1e-2).weight_decay(0.1);
  std::vector<torch::optim::OptimizerParamGroup> gc{torch::optim::OptimizerParamGroup(cpu)};
  std::vector<torch::optim::OptimizerParamGroup> gg{torch::optim::OptimizerParamGroup(gpu)};
  sut::FusedAdam a(gc, o, nullptr, sut::FusedAdamFlags{}, sut::fully_patched());
  sut::FusedAdam b(gg, o, nullptr, sut::FusedAdamFlags{}, sut::fully_patched());
  for (int step = 0; step < 3; ++step) {
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<float> g(sizes[k]);
      for (float& x : g) x = rng.symmetric_unit();
      cpu[k].mutable_grad() = torch::tensor(g);
      gpu[k].mutable_grad() = torch::tensor(g).to(torch::kCUDA);
    }
    a.step();
    b.step();
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_TRUE(torch::equal(cpu[k].detach(), gpu[k].detach().cpu())) << "tensor " << k;
  }
}

TEST(HybridOptimizer, ModelParamsEqualTheReferenceOnCuda_CUDA) {
  SC_REQUIRE_CUDA();
  // The accelerator is CUDA here: shards, fp32 copies and the FusedAdam kernel run on the
  // device, host copies are pinned, and the comparison is still bit for bit.
  const props::Property* p =
      props::find_property("HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep");
  ASSERT_NE(p, nullptr);
  const props::RunOutcome out = props::run_property([&] { p->body(sut::fully_patched()); });
  EXPECT_FALSE(out.failed()) << out.report;
}

}  // namespace
}  // namespace sc
