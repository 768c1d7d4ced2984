// The real code on real ranks (sim/rig/megatron_world.h): one worker process per data-parallel
// rank, Megatron's own DistributedDataParallel reducing the grads over Gloo and its
// DistributedOptimizer all-gathering the params, against the same tree's one-process emulation
// (every rank in one worker, the reduced grads handed over, no collective) and the port.
#pragma once

#include <string>

#include "model/spec.h"
#include "properties/gen/step_gen.h"
#include "sim/port/behaviour.h"
#include "sim/rig/megatron_worker.h"

namespace sc::props {

// What the real ranks are fed and why some worlds are left out (docs/properties.md):
// rank r of an instance of n ranks (dp, or expert_dp) gets rig::grad_part(G, r, n) * dp of every
// reduced gradient G in its backward pass, which DDP scales by 1/dp (the dense dp, experts too)
// and the reduce-scatter sums back to G exactly; that needs dp a power of two (1/dp exact) and
// expert_dp dividing it.
bool real_ranks_world(const model::CaseSpec& spec);

// Builds every rank of both instances of `spec` on a world of spec.dp real ranks of `tree` (world
// rank g holding dense rank g and expert rank g / ep, ep = dp / expert_dp), in
// the tree's one-process emulation and on the port under `behaviour`, steps them through
// `schedule` (grads through each backward pass) and RC_ASSERTs that after construction and every
// step each real rank holds what its emulated rank holds (pieces, masters, moments, steps,
// placement), bit for bit; that every real rank's full parameters equal every other's and, on
// each rank's owned pieces, that rank's emulated parameters; and that the port holds what the
// emulation holds.
void run_real_ranks(const model::CaseSpec& spec, const gen::Schedule& schedule,
                    const sut::Behaviour& behaviour, const rig::MegatronTarget& tree);

// What real ranks save and load, and what the port beside them saves and loads for it.
enum class RealRanksCheckpoint {
  kTorch,             // Megatron's torch format; the port's dp_zero_gather_scatter
  kFullyReshardable,  // torch_dist, the fully_reshardable sharding; the port's fully_reshardable
  kDpReshardable,     // torch_dist, dp_reshardable (Megatron's default); the port's distributed
                      // checkpoint (fully_sharded_model_space: the port has no dp_reshardable)
};
// "the torch-format checkpoint", ...
std::string real_checkpoint_name(RealRanksCheckpoint c);

// Real ranks resumed from `checkpoint`: Megatron's `torch` format (kTorch: each rank's
// `state_dict()`, the param state gathered on DP rank 0, loaded as `load_checkpoint` does,
// rig::load_dp_zero) or its sharded `torch_dist` checkpoint (rig::save_sharded, a directory the
// ranks share) with the `fully_reshardable` optimizer sharding (the param state all-gathered and
// cut into model-space tensors) or `dp_reshardable` (each rank's bucket shards). Every rank of each
// instance of `spec` steps `split` times on a world of real ranks of `tree`, the DP group saves
// and a fresh group with other initial values loads. RC_ASSERTs that nothing raises and that right
// after the load and after every later step each resumed rank holds what the uninterrupted one
// holds, bit for bit (gathered parameters included), and that the port, saved and loaded through
// its counterpart (RealRanksCheckpoint) under `behaviour`, holds what the resumed real ranks hold.
void run_real_ranks_resume(const model::CaseSpec& spec, const gen::Schedule& schedule, size_t split,
                           RealRanksCheckpoint checkpoint, const sut::Behaviour& behaviour,
                           const rig::MegatronTarget& tree);

// Real ranks resharded through `fully_reshardable`: every rank of each instance of `spec` steps
// `split` times on a world of spec.dp real ranks of `tree`, saves, and a fresh group on a world
// of `other_dp` real ranks (expert dp `other_dp`) loads it. RC_ASSERTs that nothing raises, that
// every element of every parameter's exp_avg, exp_avg_sq and fp32 master and every piece's step
// count come back bit for bit (gathered from all ranks on both sides), and that right after the
// load and after every later step (at `other_dp`) the port, resharded the same way under
// `behaviour`, holds what the loading real ranks hold.
void run_real_ranks_reshard(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            size_t split, int other_dp, const sut::Behaviour& behaviour,
                            const rig::MegatronTarget& tree);

// DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState against real code: every rank
// of each instance of `spec` steps through `schedule` on a world of spec.dp real ranks of `tree`,
// the DP group saves in `format` (as run_real_ranks_resume does) and a fresh group with other
// initial values loads it, on the same world or, for kFullyReshardable with `other_dp` > 0, on a
// world of `other_dp` ranks (expert dp `other_dp`). RC_ASSERTs that nothing raises and that every
// element of every parameter's exp_avg, exp_avg_sq and fp32 master and every piece's step count
// come back bit for bit. Runs worlds of real_ranks_world and of one rank; throws
// rig::NotRunAgainstRealCode for any other DP size.
void run_real_ranks_round_trip(const model::CaseSpec& spec, const gen::Schedule& schedule,
                               rig::GatheredFormat format, int other_dp,
                               const sut::Behaviour& behaviour, const rig::MegatronTarget& tree);

}  // namespace sc::props
