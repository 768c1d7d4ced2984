// The port's FusedAdam on its own, against the model's FusedAdam order: tensor lists with
// zero-size tensors anywhere (last included) and more tensors than one multi-tensor launch.
#pragma once

#include "sim/port/behaviour.h"

namespace sc::props {

// Draws sizes, values and steps, runs FusedAdam under `behaviour` and RC_ASSERTs that every tensor
// equals the reference bit for bit and that empty tensors are no-ops.
void run_fused_adam_property(const sut::Behaviour& behaviour);

}  // namespace sc::props
