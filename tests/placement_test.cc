// The simulated device places (sim/port/placement.h): with the CPU standing in for the
// accelerator, host memory is told apart from accelerator memory as a device would tell it, and
// kernels raise on operands in the wrong place. Then the hybrid optimizer's use of it: the
// post-load move (`_move_new_state_to_right_device`) and the PT-03 mutant without it.
#include <gtest/gtest.h>

#include "sim/port/placement.h"
#include "sim/rig/rank_rig.h"
#include "tests/support/cases.h"
#include "tests/support/devices.h"

namespace sc::sut {
namespace {


TEST(Placement, NewStorageIsAcceleratorMemoryUntilMarkedHost) {
  const torch::Tensor t = torch::zeros({4});
  EXPECT_EQ(place_of(t, kCpu), Place::kAccelerator);
  mark_host(t, kCpu);
  EXPECT_EQ(place_of(t, kCpu), Place::kHost);
  // A view shares its storage and so its place; a tensor made like it does not.
  EXPECT_EQ(place_of(t.narrow(0, 1, 2), kCpu), Place::kHost);
  EXPECT_EQ(place_of(torch::zeros_like(t), kCpu), Place::kAccelerator);
}

TEST(Placement, ToPlaceCopiesOnlyWhenThePlaceChanges) {
  const torch::Tensor dev = torch::arange(3, torch::kFloat);
  const torch::Tensor same = to_place(dev, Place::kAccelerator, kCpu);
  EXPECT_EQ(same.unsafeGetTensorImpl(), dev.unsafeGetTensorImpl());
  const torch::Tensor host = to_place(dev, Place::kHost, kCpu);
  EXPECT_NE(host.unsafeGetTensorImpl(), dev.unsafeGetTensorImpl());
  EXPECT_EQ(place_of(host, kCpu), Place::kHost);
  EXPECT_TRUE(torch::equal(host, dev));
  const torch::Tensor back = to_place(host, Place::kAccelerator, kCpu);
  EXPECT_EQ(place_of(back, kCpu), Place::kAccelerator);
  EXPECT_EQ(place_of(clone_in_place(host, kCpu), kCpu), Place::kHost);
  EXPECT_EQ(place_of(clone_in_place(dev, kCpu), kCpu), Place::kAccelerator);
}

TEST(Placement, AKernelRaisesOnAnOperandInTheWrongPlace) {
  const torch::Tensor host = mark_host(torch::zeros({2}), kCpu);
  EXPECT_NO_THROW(require_place(host, Place::kHost, kCpu, "k", [] { return "x"; }));
  EXPECT_NO_THROW(require_place(torch::Tensor(), Place::kHost, kCpu, "k", [] { return "x"; }));
  try {
    require_place(host, Place::kAccelerator, kCpu, "the kernel", [] { return "its moment"; });
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(e.msg().find("Expected all tensors to be on the same device: the kernel runs on "
                           "the accelerator but its moment is on the host"),
              std::string::npos)
        << e.msg();
  }
}

// Two bf16 parameters stepped on the accelerator (offload fraction 0), saved after one step and
// read back with map_location="cpu": the post-load move puts the moments back on the
// accelerator; without it (PT-03) the accelerator FusedAdam's next step raises.
// `inspect`: report the first moment on the host before stepping.
std::string step_after_load_mapped_to_host(const char* variant, bool inspect) {
  model::CaseSpec c = test::one_param_case("p1", {1}, model::DType::kBFloat16);
  c.params.push_back(c.params[0]);
  c.params[1].name = "p2";
  c.cpu_offload = true;
  c.offload_fraction = 0.0;
  const Behaviour b = *behaviour_by_name(variant);
  rig::RankRig a(c, model::Instance::kDense, 0, b, kCpu, 1);
  rig::RankRig z(c, model::Instance::kDense, 0, b, kCpu, 2);
  model::StepInputs in;
  in.grads = {{0.5f}, {-0.25f}};
  in.group_hyper = {model::AdamWHyper{1e-3, 0.9, 0.999, 1e-8, 0.0}};
  a.step(in);
  z.load(a.save(), /*map_to_host=*/true);
  for (size_t i = 0; inspect && i < 2; ++i) {
    for (const auto& [name, on_host] : z.placement(0, i).state_on_host) {
      if (on_host) return name + " of entry " + std::to_string(i) + " is on the host";
    }
  }
  try {
    z.step(in);
  } catch (const c10::Error& e) {
    return e.msg();
  }
  return "";
}

TEST(PlacementAfterLoad, StateMappedToTheHostMovesBackToTheAccelerator) {
  EXPECT_EQ(step_after_load_mapped_to_host("upstream", true), "");
  EXPECT_EQ(step_after_load_mapped_to_host(fully_patched().name.c_str(), true), "");
}

TEST(PlacementAfterLoad, WithoutTheMovePt03LeavesItOnTheHost) {
  EXPECT_EQ(step_after_load_mapped_to_host("PT-03", true), "exp_avg of entry 0 is on the host");
  // And the kernel refuses it, as a device would.
  const std::string error = step_after_load_mapped_to_host("PT-03", false);
  EXPECT_NE(error.find("Expected all tensors to be on the same device: the accelerator FusedAdam "
                       "step runs on the accelerator but a moment of HDO param 0 is on the host"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace sc::sut
