// Megatron's loss scaling (optimizer/grad_scaler.py), as the reference model: a constant scale,
// or a dynamic one that halves after `hysteresis` steps with non-finite grads and doubles after
// `growth_interval` steps without. The arithmetic is fp32, as Megatron's one-element fp32 scale
// tensors do it; the reciprocal is taken in double and rounded to fp32.
//
// The hysteresis count is restored only when the scale grows, not after every step with finite
// grads: `hysteresis` non-finite steps bring the scale down whether or not they are consecutive
// (the docstring says "consecutive"; the code, like DeepSpeed's default without
// `consecutive_hysteresis`, counts them all since the last growth).
#pragma once

#include <cstdint>

namespace sc::model {

// The factory's scaler arguments: `--loss-scale` (constant) or, for fp16 without it, the dynamic
// scaler with `--initial-loss-scale`, `--min-loss-scale`, `--loss-scale-window` and
// `--hysteresis` (growth 2, backoff 0.5).
struct GradScalerConfig {
  bool dynamic = true;
  float initial_scale = 4294967296.0f;  // 2^32, Megatron's default initial loss scale
  float min_scale = 1.0f;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 1000;
  int64_t hysteresis = 2;
};

// Where `config` breaks an assertion of Megatron's constructors, a message naming the argument;
// empty when it is valid.
const char* grad_scaler_config_error(const GradScalerConfig& config);

// The scaler's state, as `state_dict()` holds it (a constant scaler has only its scale).
struct GradScalerState {
  float scale = 1.0f;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker = 0;

  friend bool operator==(const GradScalerState& a, const GradScalerState& b) {
    return a.scale == b.scale && a.growth_tracker == b.growth_tracker &&
           a.hysteresis_tracker == b.hysteresis_tracker;
  }
};

class GradScalerModel {
 public:
  explicit GradScalerModel(const GradScalerConfig& config);
  // After a step whose grads were (`found_inf`) or were not all finite.
  void update(bool found_inf);
  const GradScalerState& state() const { return state_; }
  // `inv_scale`: 1 / scale in double, rounded to fp32.
  float inv_scale() const;
  // `load_state_dict`.
  void load(const GradScalerState& state) { state_ = state; }

 private:
  GradScalerConfig config_;
  GradScalerState state_;
};

}  // namespace sc::model
