// Port of Megatron's loss scalers (megatron/core/optimizer/grad_scaler.py at d8b71082): the
// scale is a one-element fp32 tensor on the accelerator, `inv_scale` its reciprocal taken in
// double and rounded to fp32; the dynamic scaler's factors and minimum are fp32 tensors too, and
// its two trackers plain integers. Constructor assertions raise "AssertionError: <condition>".
#pragma once

#include <optional>

#include "sim/port/behaviour.h"
#include "sim/port/torch_pch.h"

namespace sc::sut {

// `scaler.state_dict()`: empty for the constant scaler.
struct GradScalerStateDict {
  std::optional<torch::Tensor> scale;
  std::optional<int64_t> growth_tracker, hysteresis_tracker;
};

class GradScaler {
 public:
  virtual ~GradScaler() = default;
  // `scale`, the live tensor.
  const torch::Tensor& scale() const { return scale_; }
  // `inv_scale`: `scale.double().reciprocal().float()`.
  torch::Tensor inv_scale() const;
  virtual void update(bool found_inf) = 0;
  virtual GradScalerStateDict state_dict() const = 0;
  virtual void load_state_dict(const GradScalerStateDict& sd) = 0;

 protected:
  GradScaler(double initial_scale, torch::Device device);
  torch::Tensor scale_;
  torch::Device device_;
};

// `ConstantGradScaler(loss_scale)`: never changes.
class ConstantGradScaler : public GradScaler {
 public:
  ConstantGradScaler(double loss_scale, torch::Device device) : GradScaler(loss_scale, device) {}
  void update(bool) override {}
  GradScalerStateDict state_dict() const override { return {}; }
  void load_state_dict(const GradScalerStateDict&) override {}
};

// `DynamicGradScaler(initial_scale, min_scale, growth_factor, backoff_factor, growth_interval,
// hysteresis)`.
class DynamicGradScaler : public GradScaler {
 public:
  struct Args {
    double initial_scale = 4294967296.0, min_scale = 1.0, growth_factor = 2.0,
           backoff_factor = 0.5;
    int64_t growth_interval = 1000, hysteresis = 2;
  };
  DynamicGradScaler(const Args& args, torch::Device device, const Behaviour& behaviour);
  void update(bool found_inf) override;
  GradScalerStateDict state_dict() const override;
  // Takes the saved scale onto the accelerator and both trackers.
  void load_state_dict(const GradScalerStateDict& sd) override;
  int64_t growth_tracker() const { return growth_tracker_; }
  int64_t hysteresis_tracker() const { return hysteresis_tracker_; }

 private:
  torch::Tensor min_scale_, growth_factor_, backoff_factor_;
  int64_t growth_interval_, hysteresis_;
  int64_t growth_tracker_ = 0, hysteresis_tracker_;
  Behaviour behaviour_;
};

}  // namespace sc::sut
