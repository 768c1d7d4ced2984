// The port's loss scalers built from the model's description of the factory's arguments, for
// the rig and for the properties that drive a scaler alone.
#pragma once

#include <memory>

#include "model/grad_scaler.h"
#include "sim/port/behaviour.h"
#include "sim/port/grad_scaler.h"
#include "sim/port/torch_pch.h"

namespace sc::rig {

// The port's loss scaler for `config`: constant or dynamic (whose rules take `behaviour`'s
// scaler mutants). Raises the constructors' AssertionError on bad arguments.
std::unique_ptr<sut::GradScaler> make_grad_scaler(const model::GradScalerConfig& config,
                                                  torch::Device device,
                                                  const sut::Behaviour& behaviour);

}  // namespace sc::rig
