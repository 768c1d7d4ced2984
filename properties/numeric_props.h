// Bodies of the numerical properties of the distributed optimizer with the hybrid optimizer
// inside: the port stepped alongside model::RankReference, rank by rank.
#pragma once

#include "model/spec.h"
#include "properties/gen/step_gen.h"
#include "properties/rank_checks.h"
#include "sim/port/behaviour.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

// Steps the checked ranks of both instances of `spec` through `schedule` under `behaviour` and
// RC_ASSERTs `claim`.
// `streams`: how the simulated streams order the port's work (default: program order).
void run_numeric_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                          const sut::Behaviour& behaviour, NumericClaim claim,
                          const rig::StreamSchedule& streams = rig::StreamSchedule{});
// Steps every checked rank of `spec` through `schedule` and RC_ASSERTs that the stream simulation
// found no race: no two operations touch one region, one writing, unordered by streams and events.
void run_stream_race_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                              const sut::Behaviour& behaviour);
// Steps every checked rank of `spec` through `schedule` and RC_ASSERTs that every non-blocking
// copy of the step flow has pinned host memory on its host side (the pin flags are on), as HDO-02
// asks.
void run_pinned_copies_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                                const sut::Behaviour& behaviour);
// Runs `spec` at its own offload fraction and at `other_fraction` and RC_ASSERTs that every owned
// piece agrees within the operation-order tolerance (sim/rig/tolerances.h).
void run_offload_invariance(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            const sut::Behaviour& behaviour, double other_fraction);
// Runs `spec` with the hybrid optimizer at fraction 1 (every piece stepped by LibTorch's AdamW on
// the host) and with the plain AdamW inner optimizer (not precision-aware), and RC_ASSERTs that
// every owned piece is bit-identical.
void run_hdo_against_plain(const model::CaseSpec& spec, const gen::Schedule& schedule,
                           const sut::Behaviour& behaviour);

// Steps `spec` (offload on) through the first `split` steps of `schedule`, saves a checkpoint,
// loads it into a freshly built rank, runs the remaining steps on both and RC_ASSERTs that every
// owned piece is bit-identical to the uninterrupted run.
void run_save_load_continue(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            size_t split, const sut::Behaviour& behaviour);
// Device placement after a load (PT-03): like run_save_load_continue, the state dict read with
// every tensor on the host when `map_to_host` (torch.load(map_location="cpu")), else where it
// was saved. RC_ASSERTs that every tensor of hdo.state and every stepped tensor lives on the
// device of its sub-optimizer (the host for a piece the model's offload plan offloads, the
// accelerator otherwise), then that both runs continue to the same values.
void run_load_placement(const model::CaseSpec& spec, const gen::Schedule& schedule, size_t split,
                        bool map_to_host, const sut::Behaviour& behaviour);
// Megatron's distributed checkpoint: after `split` steps the rank is saved, a fresh rank of the
// same case (other initial values) loads it with RankUnderTest::load_distributed, and both continue;
// every model piece, optimizer piece and state must stay equal. Any inner optimizer.
void run_dist_ckpt_resume(const model::CaseSpec& spec, const gen::Schedule& schedule, size_t split,
                          const sut::Behaviour& behaviour);

// A gathered checkpoint format (rig::GatheredFormat) round trip: every DP rank of each
// instance of `spec` steps through `schedule`, the DP group is saved in `format`, and a fresh DP
// group (other initial values; DP size `other_dp` when not 0, which only "fully_reshardable"
// allows) loads it. RC_ASSERTs that every element of every param's exp_avg, exp_avg_sq and fp32
// master comes back bit for bit (MEG-04, DS-07).
void run_gathered_ckpt_round_trip(const model::CaseSpec& spec, const gen::Schedule& schedule,
                                  rig::GatheredFormat format, int other_dp,
                                  const sut::Behaviour& behaviour);

}  // namespace sc::props
