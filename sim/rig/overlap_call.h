// DDP's param all-gather overlapped with the forward pass (overlap_param_gather), on real
// Megatron code as the trainer drives it (the worker's `overlap_training` op,
// sim/megatron/overlap.py): the same training steps through Megatron's DistributedDataParallel and
// DistributedOptimizer with the all-gather dispatched by DDP's forward pre-hooks, and without, over
// a one-member gloo group. The port has no forward pre-hooks: this seam has a real-code side only.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "sim/rig/megatron_worker.h"
#include "sim/rig/wrapper_call.h"

namespace sc::rig {

struct OverlapCall {
  std::vector<WrapperParam> params;  // bf16 where half, else fp32; registered in this order
  std::vector<int> order;            // the order the model's forward calls their modules in
  int64_t bucket_size = 1;           // DDP's bucket size in elements
  std::vector<std::vector<std::vector<float>>> grads;  // per step, per parameter
};

struct OverlapOutcome {
  // Each parameter's values (fp32) after every step, with overlap_param_gather and without, and
  // the step that raised in either ("step K: Type: message").
  std::vector<std::vector<std::vector<float>>> overlapped, synchronous;
  std::optional<std::string> overlapped_raised, synchronous_raised;
};

OverlapOutcome run_overlap_training(const MegatronTarget& tree, const OverlapCall& call);

// How RapidCheck prints a drawn call.
void showValue(const OverlapCall& call, std::ostream& os);

}  // namespace sc::rig
