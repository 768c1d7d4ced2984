// A direct call of Megatron's `get_grad_norm_fp32(grads_for_norm, norm_type,
// grad_stats_parallel_group)` on every rank of a grad-stats group, as callers outside the
// optimizer make it (the optimizer itself passes norm type 2 only): each rank its own list of
// fp32 grads, the group all-reducing what each rank shares. On the port (sim/port/clip_grads.h)
// or on real Megatron code (the worker's `grad_norm` op, sim/megatron/worker.py), chosen by the
// target as build_rank() chooses.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "sim/rig/rank_under_test.h"

namespace sc::rig {

struct GradNormCall {
  // Per rank of the group, its grads (each a 1-D fp32 tensor of at least one element).
  std::vector<std::vector<std::vector<float>>> grads;
  double norm_type = 2.0;  // a positive p, or infinity
};

struct GradNormOutcome {
  std::vector<double> norms;    // per rank, what the call returned
  std::optional<int> raising_rank;  // the first rank whose call raised, in rank order
  std::string raised;           // "ValueError: ..." where one did
};

GradNormOutcome call_grad_norm(const Target& target, const GradNormCall& call);

// How RapidCheck prints a drawn call: the norm type, then each rank's grads.
void showValue(const GradNormCall& call, std::ostream& os);

}  // namespace sc::rig
