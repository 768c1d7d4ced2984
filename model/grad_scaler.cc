#include "model/grad_scaler.h"

#include <algorithm>

namespace sc::model {

const char* grad_scaler_config_error(const GradScalerConfig& c) {
  if (!(c.initial_scale > 0.0f)) return "the initial loss scale must be positive";
  if (!c.dynamic) return "";
  if (!(c.min_scale > 0.0f)) return "the minimum loss scale must be positive";
  if (!(c.min_scale <= c.initial_scale)) {
    return "the minimum loss scale must not exceed the initial one";
  }
  if (!(c.growth_factor > 1.0f)) return "the growth factor must be above 1";
  if (!(c.backoff_factor > 0.0f && c.backoff_factor < 1.0f)) {
    return "the backoff factor must lie strictly between 0 and 1";
  }
  if (c.growth_interval <= 0) return "the loss scale window must be positive";
  if (c.hysteresis <= 0) return "the hysteresis must be positive";
  return "";
}

GradScalerModel::GradScalerModel(const GradScalerConfig& config) : config_(config) {
  state_.scale = config.initial_scale;
  state_.hysteresis_tracker = config.dynamic ? config.hysteresis : 0;
}

void GradScalerModel::update(bool found_inf) {
  if (!config_.dynamic) return;
  if (found_inf) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker -= 1;
    if (state_.hysteresis_tracker <= 0) {
      state_.scale = std::max(state_.scale * config_.backoff_factor, config_.min_scale);
    }
    return;
  }
  state_.growth_tracker += 1;
  if (state_.growth_tracker == config_.growth_interval) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker = config_.hysteresis;
    state_.scale = state_.scale * config_.growth_factor;
  }
}

float GradScalerModel::inv_scale() const {
  return static_cast<float>(1.0 / static_cast<double>(state_.scale));
}

}  // namespace sc::model
