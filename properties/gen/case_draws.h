// The draws of the replayable properties: each returns the CaseInputs one property checks
// (properties/gen/case_inputs.h), drawn inside a RapidCheck property.
#pragma once

#include <functional>

#include "properties/gen/case_inputs.h"

namespace sc::gen {

// The most steps a drawn schedule has.
constexpr int kMaxSteps = 8;
// The largest DP size the gathered-checkpoint property builds.
constexpr int kMaxGatheredDp = 6;

// A case alone (the shard-builder properties).
props::CaseInputs case_only();
// A case and a schedule of up to kMaxSteps steps.
props::CaseInputs case_and_schedule();
// A case with a schedule of at least two steps and a split point inside it; offloaded when
// `force_offload`.
props::CaseInputs split_schedule(bool force_offload);
// An offloaded case.
props::CaseInputs offloaded_case();
// A case whose every step has lr 0 and weight decay 0.
props::CaseInputs zero_lr_case();
// An offloaded case, a schedule and a second offload fraction to compare against.
props::CaseInputs two_fractions_case();
// A split offloaded case whose state dict is read where it was saved, or with
// map_location="cpu".
props::CaseInputs mapped_load_case();
// A case of at most kMaxGatheredDp DP ranks, two steps, a gathered checkpoint format, and for
// fully_reshardable the DP size that loads it (0: the same); `on_real_ranks`: the same drawn for
// real ranks (real_ranks_gathered_case).
props::CaseInputs gathered_case(bool on_real_ranks);
// An offloaded case stepped `steps` times at most.
std::function<props::CaseInputs()> offloaded_steps(int steps);
// A case for real ranks (props::real_ranks_world): dp 2 or 4, EP 1, 2 or dp, up to three steps.
props::CaseInputs real_ranks_case();
// gathered_case for real ranks: a real-ranks case (or, one time in five, a world of one rank), a
// gathered checkpoint format, and for fully_reshardable the same DP size or the other of 2 and 4.
props::CaseInputs real_ranks_gathered_case();
// A real-ranks case with at least two steps and a split among them; the hybrid optimizer
// precision-aware only (FINDINGS.md, F8).
props::CaseInputs real_ranks_resume_case();
// A real-ranks resume case saved in fully_reshardable at dp 2 or 4 and loaded at the other.
props::CaseInputs real_ranks_reshard_case();

}  // namespace sc::gen
