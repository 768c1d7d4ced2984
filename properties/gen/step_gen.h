// Generators of step schedules for the numerical properties: 1 to 8 steps, each with a gradient
// kind per parameter (ordinary, all zero, tiny, large; values from a per-step seed) and per-group
// learning rate and weight decay that may change between steps.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include <rapidcheck.h>

#include "model/reference.h"
#include "model/spec.h"

namespace sc::gen {

// How one parameter's gradient is drawn in one step.
enum class GradKind { kOrdinary, kZero, kTiny, kLarge };

// One generated step, before materialisation.
struct StepDraw {
  uint64_t grad_seed = 0;
  std::vector<GradKind> kinds;             // per case parameter
  std::vector<model::AdamWHyper> hyper;    // per case group index
};

// A schedule of steps.
struct Schedule {
  std::vector<StepDraw> steps;
};

// A schedule for `spec` with 1 to `max_steps` steps.
rc::Gen<Schedule> schedule(const model::CaseSpec& spec, int max_steps);
// A schedule whose every step has learning rate 0 and weight decay 0.
rc::Gen<Schedule> zero_lr_schedule(const model::CaseSpec& spec, int max_steps);
// The inputs of step `draw` for `spec`: grads filled from the step's seed by kind.
model::StepInputs materialise(const model::CaseSpec& spec, const StepDraw& draw);
// The largest learning rate of the schedule.
double max_lr(const Schedule& schedule);

void showValue(const Schedule& schedule, std::ostream& os);

}  // namespace sc::gen
