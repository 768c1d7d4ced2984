// Megatron's loss scalers: the port's constant and dynamic scalers against the model's, over
// drawn arguments (invalid ones included) and sequences of steps with finite or non-finite grads
// and state-dict round trips into a fresh scaler.
#pragma once

#include "sim/port/behaviour.h"

namespace sc::props {

// RC_ASSERTs that the port refuses exactly the arguments the model calls invalid, and that after
// every command the scale, `inv_scale` (bit for bit) and both trackers equal the model's.
void run_grad_scaler_property(const sut::Behaviour& behaviour);

}  // namespace sc::props
