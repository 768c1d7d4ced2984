#include "properties/gen/case_draws.h"

#include <algorithm>

#include <rapidcheck.h>

#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"

namespace sc::gen {

props::CaseInputs case_only() {
  props::CaseInputs in;
  in.c = *case_spec();
  return in;
}

props::CaseInputs case_and_schedule() {
  props::CaseInputs in;
  in.c = *case_spec();
  in.schedule = *schedule(in.c, kMaxSteps);
  return in;
}

// A case with a schedule of at least two steps and a split point inside it.
props::CaseInputs split_schedule(bool force_offload) {
  props::CaseInputs in;
  in.c = *case_spec();
  if (force_offload) in.c.cpu_offload = true;
  in.schedule = *schedule(in.c, kMaxSteps);
  RC_PRE(in.schedule.steps.size() >= 2);
  in.split = *rc::gen::inRange<size_t>(1, in.schedule.steps.size());
  return in;
}

props::CaseInputs offloaded_case() {
  props::CaseInputs in = case_only();
  in.c.cpu_offload = true;
  return in;
}

props::CaseInputs zero_lr_case() {
  props::CaseInputs in = case_only();
  in.schedule = *zero_lr_schedule(in.c, kMaxSteps);
  return in;
}

props::CaseInputs two_fractions_case() {
  props::CaseInputs in = offloaded_case();
  in.other_fraction = *weighted_choice<double>({{1, 0.0}, {1, 1.0}, {1, 0.5}, {1, 0.1}});
  in.schedule = *schedule(in.c, kMaxSteps);
  return in;
}

props::CaseInputs mapped_load_case() {
  props::CaseInputs in = split_schedule(/*force_offload=*/true);
  if (*rc::gen::arbitrary<bool>()) in.map_location = "cpu";
  return in;
}

props::CaseInputs gathered_case(bool on_real_ranks) {
  if (on_real_ranks) return real_ranks_gathered_case();
  props::CaseInputs in;
  in.c = *case_spec();
  // Every DP rank is built twice: keep the groups small.
  in.c.dp = std::min(in.c.dp, kMaxGatheredDp);
  in.c.expert_dp = std::min(in.c.expert_dp, kMaxGatheredDp);
  // Megatron's arguments allow the hybrid optimizer only precision-aware; the other one cannot
  // load these formats at all (finding F8).
  if (in.c.cpu_offload) in.c.precision_aware = true;
  in.schedule = *schedule(in.c, 2);
  in.checkpoint_format = *weighted_choice<std::string>(
      {{1, "dp_zero_gather_scatter"}, {2, "fully_reshardable"}});
  if (in.checkpoint_format == "fully_reshardable") {
    in.other_dp =
        *weighted_choice<int>({{2, 0}, {1, *rc::gen::inRange(1, kMaxGatheredDp + 1)}});
  }
  return in;
}

props::CaseInputs real_ranks_case() {
  props::CaseInputs in;
  in.c = *case_spec();
  // One worker process per rank: worlds of two and four, expert parallelism 1 mostly.
  in.c.dp = *weighted_choice<int64_t>({{3, 2}, {1, 4}});
  in.c.expert_dp = in.c.dp / *weighted_choice<int64_t>({{2, 1}, {1, 2}, {1, in.c.dp}});
  in.schedule = *schedule(in.c, 3);
  return in;
}

props::CaseInputs real_ranks_gathered_case() {
  props::CaseInputs in = real_ranks_case();
  if (*weighted_choice<int>({{4, 0}, {1, 1}}) == 1) in.c.dp = in.c.expert_dp = 1;
  if (in.c.cpu_offload) in.c.precision_aware = true;  // as gathered_case
  in.checkpoint_format =
      *weighted_choice<std::string>({{1, "dp_zero_gather_scatter"}, {2, "fully_reshardable"}});
  if (in.checkpoint_format == "fully_reshardable") {
    in.other_dp = *weighted_choice<int>({{2, 0}, {1, in.c.dp == 2 ? 4 : 2}});
    if (in.other_dp == in.c.dp) in.other_dp = 0;
  }
  return in;
}

props::CaseInputs real_ranks_resume_case() {
  props::CaseInputs in = real_ranks_case();
  // As for the gathered formats: the hybrid optimizer only precision-aware (FINDINGS.md, F8).
  if (in.c.cpu_offload) in.c.precision_aware = true;
  RC_PRE(in.schedule.steps.size() >= 2);
  in.split = *rc::gen::inRange<size_t>(1, in.schedule.steps.size());
  return in;
}

props::CaseInputs real_ranks_reshard_case() {
  props::CaseInputs in = real_ranks_resume_case();
  in.checkpoint_format = "fully_reshardable";
  in.other_dp = in.c.dp == 2 ? 4 : 2;
  return in;
}

// An offloaded case stepped `steps` times at most.
std::function<props::CaseInputs()> offloaded_steps(int steps) {
  return [steps] {
    props::CaseInputs in = offloaded_case();
    in.schedule = *schedule(in.c, steps);
    return in;
  };
}

}  // namespace sc::gen
