// What hybrid_optimizer.cc and hybrid_optimizer_state.cc share and no caller needs.
// (It includes no hybrid_optimizer.h, so the two units stay apart.)
#pragma once

#include "sim/port/fused_adam.h"
#include "sim/port/optim_state.h"

namespace sc::sut::hdo_detail {

// The host AdamW state of `inner` in `sub`, or nullptr (a FusedAdam, or no state yet).
inline torch::optim::AdamWParamState* adamw_state(torch::optim::Optimizer* sub,
                                                  const torch::Tensor& inner) {
  if (dynamic_cast<FusedAdam*>(sub)) return nullptr;
  auto it = sub->state().find(optim_state_key(inner));
  return it == sub->state().end() ? nullptr
                                  : static_cast<torch::optim::AdamWParamState*>(it->second.get());
}

}  // namespace sc::sut::hdo_detail
