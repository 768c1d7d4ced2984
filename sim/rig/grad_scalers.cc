#include "sim/rig/grad_scalers.h"

namespace sc::rig {

std::unique_ptr<sut::GradScaler> make_grad_scaler(const model::GradScalerConfig& config,
                                                  torch::Device device,
                                                  const sut::Behaviour& behaviour) {
  if (!config.dynamic) {
    return std::make_unique<sut::ConstantGradScaler>(config.initial_scale, device);
  }
  sut::DynamicGradScaler::Args a;
  a.initial_scale = config.initial_scale;
  a.min_scale = config.min_scale;
  a.growth_factor = config.growth_factor;
  a.backoff_factor = config.backoff_factor;
  a.growth_interval = config.growth_interval;
  a.hysteresis = config.hysteresis;
  return std::make_unique<sut::DynamicGradScaler>(a, device, behaviour);
}

}  // namespace sc::rig
