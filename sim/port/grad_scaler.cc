#include "sim/port/grad_scaler.h"

namespace sc::sut {

namespace {

void require(bool holds, const char* condition) {
  TORCH_CHECK(holds, "AssertionError: ", condition);
}

torch::Tensor one_float(double value, torch::Device device) {
  return torch::tensor({value}, torch::TensorOptions().dtype(torch::kFloat)).to(device);
}

}  // namespace

GradScaler::GradScaler(double initial_scale, torch::Device device) : device_(device) {
  require(initial_scale > 0.0, "initial_scale > 0.0");
  scale_ = one_float(initial_scale, device);
}

torch::Tensor GradScaler::inv_scale() const {
  return scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
}

DynamicGradScaler::DynamicGradScaler(const Args& a, torch::Device device,
                                     const Behaviour& behaviour)
    : GradScaler(a.initial_scale, device),
      growth_interval_(a.growth_interval),
      hysteresis_(a.hysteresis),
      hysteresis_tracker_(a.hysteresis),
      behaviour_(behaviour) {
  require(a.min_scale > 0.0, "min_scale > 0.0");
  require(a.min_scale <= a.initial_scale, "min_scale <= initial_scale");
  min_scale_ = one_float(a.min_scale, device);
  require(a.growth_factor > 1.0, "growth_factor > 1.0");
  growth_factor_ = one_float(a.growth_factor, device);
  require(a.backoff_factor < 1.0, "backoff_factor < 1.0");
  require(a.backoff_factor > 0.0, "backoff_factor > 0.0");
  backoff_factor_ = one_float(a.backoff_factor, device);
  require(a.growth_interval > 0, "growth_interval > 0");
  require(a.hysteresis > 0, "hysteresis > 0");
}

void DynamicGradScaler::update(bool found_inf) {
  if (found_inf) {
    // SCALER-growth-tracker-kept: the run of finite steps survives a non-finite one.
    if (!behaviour_.has(Deviation::kScalerGrowthTrackerKept)) growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) {
      // SCALER-no-min-scale: the backoff is not held at the minimum.
      scale_ = behaviour_.has(Deviation::kScalerNoMinScale)
                   ? scale_ * backoff_factor_
                   : torch::max(scale_ * backoff_factor_, min_scale_);
    }
    return;
  }
  growth_tracker_ += 1;
  // SCALER-hysteresis-every-finite-step: the hysteresis count restored after every finite step.
  if (behaviour_.has(Deviation::kScalerHysteresisEveryFiniteStep))
    hysteresis_tracker_ = hysteresis_;
  if (growth_tracker_ == growth_interval_) {
    growth_tracker_ = 0;
    hysteresis_tracker_ = hysteresis_;
    scale_ = scale_ * growth_factor_;
  }
}

GradScalerStateDict DynamicGradScaler::state_dict() const {
  return {scale_, growth_tracker_, hysteresis_tracker_};
}

void DynamicGradScaler::load_state_dict(const GradScalerStateDict& sd) {
  TORCH_CHECK(sd.scale && sd.growth_tracker && sd.hysteresis_tracker,
              "KeyError: a dynamic grad scaler's state dict needs 'scale', 'growth_tracker' and "
              "'hysteresis_tracker'");
  scale_ = sd.scale->to(device_);
  growth_tracker_ = *sd.growth_tracker;
  hysteresis_tracker_ = *sd.hysteresis_tracker;
}

}  // namespace sc::sut
