// What one step is given: the DP-reduced grads, each group's hyper-parameters, and what the
// step flow before the optimizer (loss scaling, found-inf, clipping) decided.
#pragma once

#include <vector>

#include "model/adamw.h"

namespace sc::model {

// Inputs of one step: the full DP-reduced gradient of every parameter and each group's
// hyper-parameters (indexed by CaseSpec group index).
struct StepInputs {
  std::vector<std::vector<float>> grads;
  std::vector<AdamWHyper> group_hyper;
  // With a loss scaler (model/grad_scaler.h): the scale's reciprocal the main grads are
  // multiplied by before the step, and whether the step is skipped (inf or NaN in a grad).
  float inv_scale = 1.0f;
  bool skip = false;
  // With clipping (model/grad_stats.h): the coefficient the unscaled main grads are multiplied
  // by, when it is below 1.
  double clip_coeff = 1.0;
};

}  // namespace sc::model
