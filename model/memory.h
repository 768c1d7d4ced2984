// Bytes one rank holds, split by where they live (accelerator, host) and by what they are.
// Three kinds exist from construction on: the param and grad buffers, and the fp32 main params
// (clones of 16-bit pieces when not precision-aware; the hybrid optimizer's fp32 copies and host
// copies). Two more appear at the first step: the grads the optimizer reads that are not views
// of a grad buffer, and the optimizer state. Only shapes, dtypes, the shard plan and the offload
// plan decide the bytes; parameter values never do.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layout.h"
#include "model/offload_plan.h"
#include "model/shard.h"
#include "model/spec.h"

namespace sc::model {

// The bytes on one side (accelerator or host).
struct SideBytes {
  int64_t param_buffer = 0;     // param buffers (accelerator only)
  int64_t grad_buffer = 0;      // grad buffers (accelerator only)
  int64_t main_params = 0;      // fp32 main params and the hybrid optimizer's copies of pieces
  int64_t grad_copies = 0;      // from the first step: grads read that are not buffer views
  int64_t optimizer_state = 0;  // from the first step: exp_avg, exp_avg_sq (and TE's master)

  // What the side holds right after the distributed optimizer is built.
  int64_t at_construction() const { return param_buffer + grad_buffer + main_params; }
  // What it holds once the optimizer has stepped.
  int64_t after_step() const { return at_construction() + grad_copies + optimizer_state; }
  SideBytes& operator+=(const SideBytes& other);
};

// Bytes of one rank (of one optimizer instance, or summed over both).
//
// optimizer_state counts exp_avg and exp_avg_sq in fp32 (8 bytes per installed element) where
// the tensor is stepped: on the host for offloaded pieces, on the accelerator otherwise. The
// precision-aware optimizer without offload is Transformer Engine's FusedAdam with master
// weights, which adds a `master_param` state per element: 4 bytes, or 2 (the int16 remainder)
// for a bf16 piece with store_param_remainders.
struct RankBytes {
  SideBytes accelerator;
  SideBytes host;
  // Host bytes in pinned memory once stepped (only with a CUDA accelerator): the hybrid
  // optimizer's host copies that are not replaced by an fp32 clone, and its host grads.
  int64_t host_pinned = 0;
  RankBytes& operator+=(const RankBytes& other);
};

// The bytes of `plan`'s rank: `layouts` = full_param_layout(spec); the offload plan (with
// param_update_in_fp32, as Megatron builds the hybrid optimizer) is computed from the plan when
// spec.cpu_offload. Host memory is pinned only when `accelerator_is_cuda`.
RankBytes rank_bytes(const CaseSpec& spec, const std::vector<BufferLayout>& layouts,
                     const RankPlan& plan, bool accelerator_is_cuda = false);

}  // namespace sc::model
