// Bodies of the training-loop properties: the rank built as training builds it (rig::Target's
// training_loop), gradients delivered by a forward and backward pass through DDP's hooks, and
// the claims that follow from training (model/training.h predicts every main grad).
#pragma once

#include "model/spec.h"
#include "properties/gen/step_gen.h"
#include "sim/port/behaviour.h"

namespace sc::props {

// What a training-loop property claims.
enum class TrainingClaim {
  // After construction and after every step, each train step (zeroing, then backward) leaves
  // every parameter of the instance a leaf that requires grad, with `.grad` dropped by DDP's hook
  // and exactly its gradient in main_grad; every step's pieces equal the reference bit for bit.
  kGradsReachMainGrads,
  // Two backward passes add up in main_grad; after the train step's zeroing (zero_grad_buffer and
  // the optimizer's zero_grad) the next backward leaves its gradient alone.
  kZeroGradClearsAccumulation,
};

// Runs `claim` on every checked rank of both instances of `spec`, gradients from `schedule`.
void run_training_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                           const sut::Behaviour& behaviour, TrainingClaim claim);

}  // namespace sc::props
