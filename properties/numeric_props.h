// Bodies of the numerical properties of the distributed optimizer with the hybrid optimizer
// inside: the port stepped alongside model::RankReference, rank by rank.
#pragma once

#include "model/spec.h"
#include "properties/gen/step_gen.h"
#include "sim/port/behaviour.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

// What a numerical property claims.
enum class NumericClaim {
  kModelParams,  // after every step every owned piece equals the reference, bit for bit
  kState,        // exp_avg, exp_avg_sq, step and the fp32 master equal the reference
  kPlacement,    // the hybrid optimizer's placement equals model::plan_offload
  kUnchanged,    // every owned piece still holds its initial value (zero-lr schedules)
};

// Steps the checked ranks of both instances of `c` through `s` under `b` and RC_ASSERTs `claim`.
// `streams`: how the simulated streams order the port's work (default: program order).
void run_numeric_property(const model::CaseSpec& c, const gen::Schedule& s,
                          const sut::Behaviour& b, NumericClaim claim,
                          const sim::StreamSchedule& streams = sim::StreamSchedule{});
// Steps every checked rank of `c` through `s` and RC_ASSERTs that the stream simulation found no
// race: no two operations touch one region, one writing, unordered by streams and events.
void run_stream_race_property(const model::CaseSpec& c, const gen::Schedule& s,
                              const sut::Behaviour& b);
// Steps every checked rank of `c` through `s` and RC_ASSERTs that every non-blocking copy of the
// step flow has pinned host memory on its host side (the pin flags are on), as HDO-02 asks.
void run_pinned_copies_property(const model::CaseSpec& c, const gen::Schedule& s,
                                const sut::Behaviour& b);
// Runs `c` at its own offload fraction and at `other_fraction` and RC_ASSERTs that every owned
// piece agrees within the operation-order tolerance (sim/rig/tolerances.h).
void run_offload_invariance(const model::CaseSpec& c, const gen::Schedule& s,
                            const sut::Behaviour& b, double other_fraction);
// Runs `c` with the hybrid optimizer at fraction 1 (every piece stepped by LibTorch's AdamW on
// the host) and with the plain AdamW inner optimizer (not precision-aware), and RC_ASSERTs that
// every owned piece is bit-identical.
void run_hdo_against_plain(const model::CaseSpec& c, const gen::Schedule& s,
                           const sut::Behaviour& b);

// Steps `c` (offload on) through the first `split` steps of `s`, saves a checkpoint, loads it
// into a freshly built rank, runs the remaining steps on both and RC_ASSERTs that every owned
// piece is bit-identical to the uninterrupted run.
void run_save_load_continue(const model::CaseSpec& c, const gen::Schedule& s, size_t split,
                            const sut::Behaviour& b);
// Device placement after a load (PT-03): like run_save_load_continue, the state dict read with
// every tensor on the host when `map_to_host` (torch.load(map_location="cpu")), else where it
// was saved. RC_ASSERTs that every tensor of hdo.state and every stepped tensor lives on the
// device of its sub-optimizer (the host for a piece the model's offload plan offloads, the
// accelerator otherwise), then that both runs continue to the same values.
void run_load_placement(const model::CaseSpec& c, const gen::Schedule& s, size_t split,
                        bool map_to_host, const sut::Behaviour& b);
// Megatron's distributed checkpoint: after `split` steps the rank is saved, a fresh rank of the
// same case (other initial values) loads it with RankUnderTest::load_distributed, and both continue;
// every model piece, optimizer piece and state must stay equal. Any inner optimizer.
void run_dist_ckpt_resume(const model::CaseSpec& c, const gen::Schedule& s, size_t split,
                          const sut::Behaviour& b);

// A gathered checkpoint format (sim::GatheredFormat) round trip: every DP rank of each
// instance of `c` steps through `s`, the DP group is saved in `format`, and a fresh DP group
// (other initial values; DP size `other_dp` when not 0, which only "fully_reshardable" allows)
// loads it. RC_ASSERTs that every element of every param's exp_avg, exp_avg_sq and fp32 master
// comes back bit for bit (MEG-04, DS-07).
void run_gathered_ckpt_round_trip(const model::CaseSpec& c, const gen::Schedule& s,
                                  sim::GatheredFormat format, int other_dp,
                                  const sut::Behaviour& b);

}  // namespace sc::props
