// The port's FusedAdam on its own, against the model's FusedAdam order: tensor lists with
// zero-size tensors anywhere (last included) and more tensors than one multi-tensor launch.
#pragma once

#include <memory>
#include <vector>

#include "model/adamw.h"
#include "sim/port/behaviour.h"
#include "sim/port/fused_adam.h"

namespace sc::props {

// The hyper-parameters the direct FusedAdam properties step with.
inline constexpr model::AdamWHyper kFusedAdamHyper{1e-2, 0.9, 0.999, 1e-8, 0.1};

// TE's FusedAdam (no master weights, `.grad` read) over one group of `params` with
// kFusedAdamHyper, under `behaviour`.
std::unique_ptr<sut::FusedAdam> one_group_fused_adam(const std::vector<torch::Tensor>& params,
                                                     const sut::Behaviour& behaviour);

// Draws sizes, values and steps, runs FusedAdam under `behaviour` and RC_ASSERTs that every tensor
// equals the reference bit for bit and that empty tensors are no-ops.
void run_fused_adam_property(const sut::Behaviour& behaviour);

}  // namespace sc::props
