#include "properties/property_table.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <rapidcheck.h>

#include "properties/diff_props.h"
#include "properties/fused_adam_props.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"
#include "properties/gen/step_gen.h"
#include "properties/numeric_props.h"

namespace sc::props {

namespace {
constexpr int kMaxSteps = 8;

using Check = std::function<void(const CaseInputs&, const sut::Behaviour&)>;
using Draw = std::function<CaseInputs()>;

// Writes the failing case to the case-file folder and logs where, the JSON and the replay
// command. Shrinking runs failing cases one after the other: the last file written is the
// shrunk case that RapidCheck reports.
void record_failure(const std::string& property, const sut::Behaviour& b, const CaseInputs& in) {
  const std::string text = to_json(CaseFile{property, b.name, in});
  std::string path;
  std::error_code ec;
  const std::filesystem::path dir(case_file_dir());
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path file = dir / (property + "." + b.name + ".json");
  std::ofstream out(file);
  out << text;
  if (out.good()) path = file.string();
  RC_LOG() << "case file: " << (path.empty() ? "(not written: " + file.string() + ")" : path)
           << "\nreplay: shardcheck-replay " << (path.empty() ? "CASE.json" : path) << "\n"
           << text;
}

// A property that draws a CaseInputs with `draw` and runs `check` on it, recording the case
// when the check fails (a discarded case is not a failure).
PropertyDef replayable(std::string name, Draw draw, Check check) {
  auto body = [name, draw, check](const sut::Behaviour& b) {
    const CaseInputs in = draw();
    try {
      check(in, b);
    } catch (const rc::detail::CaseResult& r) {
      if (r.type == rc::detail::CaseResult::Type::Failure) record_failure(name, b, in);
      throw;
    } catch (...) {
      record_failure(name, b, in);
      throw;
    }
  };
  return PropertyDef{name, body, check};
}

CaseInputs case_only() {
  CaseInputs in;
  in.c = *gen::case_spec();
  return in;
}

CaseInputs case_and_schedule() {
  CaseInputs in;
  in.c = *gen::case_spec();
  in.schedule = *gen::schedule(in.c, kMaxSteps);
  return in;
}

// A case with a schedule of at least two steps and a split point inside it.
CaseInputs split_schedule(bool force_offload) {
  CaseInputs in;
  in.c = *gen::case_spec();
  if (force_offload) in.c.cpu_offload = true;
  in.schedule = *gen::schedule(in.c, kMaxSteps);
  RC_PRE(in.schedule.steps.size() >= 2);
  in.split = *rc::gen::inRange<size_t>(1, in.schedule.steps.size());
  return in;
}

// The largest DP size the gathered-checkpoint property builds.
constexpr int kMaxGatheredDp = 6;

sim::GatheredFormat gathered_format(const CaseInputs& in) {
  if (in.checkpoint_format == "dp_zero_gather_scatter") return sim::GatheredFormat::kDpZero;
  RC_ASSERT(in.checkpoint_format == "fully_reshardable");
  return sim::GatheredFormat::kFullyReshardable;
}

Check diff(DiffClaim claim) {
  return [claim](const CaseInputs& in, const sut::Behaviour& b) {
    run_diff_property(in.c, b, claim);
  };
}

Check numeric(NumericClaim claim) {
  return [claim](const CaseInputs& in, const sut::Behaviour& b) {
    run_numeric_property(in.c, in.schedule, b, claim);
  };
}

}  // namespace

const std::vector<PropertyDef>& diff_properties() {
  static const std::vector<PropertyDef> kTable = {
      replayable("ShardBuilderDiff.PortRangesEqualModelOnEveryRank", case_only,
                 diff(DiffClaim::kRanges)),
      replayable("ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing", case_only,
                 diff(DiffClaim::kInstalled)),
      replayable("ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank", case_only,
                 diff(DiffClaim::kConstructs)),
      replayable("HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep",
                 case_and_schedule, numeric(NumericClaim::kModelParams)),
      replayable("HybridOptimizerDiff.OptimizerStateEqualsTheReference", case_and_schedule,
                 numeric(NumericClaim::kState)),
      replayable("HybridOptimizerDiff.PlacementEqualsTheOffloadPlan",
                 [] {
                   CaseInputs in = case_only();
                   in.c.cpu_offload = true;
                   return in;
                 },
                 numeric(NumericClaim::kPlacement)),
      replayable("HybridOptimizerDiff.ZeroLrAndWeightDecayLeaveParamsUnchanged",
                 [] {
                   CaseInputs in = case_only();
                   in.schedule = *gen::zero_lr_schedule(in.c, kMaxSteps);
                   return in;
                 },
                 numeric(NumericClaim::kUnchanged)),
      replayable("HybridOptimizerDiff.OffloadFractionDoesNotChangeTheResult",
                 [] {
                   CaseInputs in = case_only();
                   in.c.cpu_offload = true;
                   in.other_fraction =
                       *gen::weighted_choice<double>({{1, 0.0}, {1, 1.0}, {1, 0.5}, {1, 0.1}});
                   in.schedule = *gen::schedule(in.c, kMaxSteps);
                   return in;
                 },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_offload_invariance(in.c, in.schedule, b, in.other_fraction);
                 }),
      replayable("HybridOptimizerDiff.HdoAtFractionOneEqualsThePlainOptimizer", case_and_schedule,
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_hdo_against_plain(in.c, in.schedule, b);
                 }),
      replayable("HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption",
                 [] { return split_schedule(/*force_offload=*/true); },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_save_load_continue(in.c, in.schedule, in.split, b);
                 }),
      replayable("HybridOptimizerDiff.LoadedStateLivesOnItsSubOptimizersDevice",
                 [] {
                   CaseInputs in = split_schedule(/*force_offload=*/true);
                   if (*rc::gen::arbitrary<bool>()) in.map_location = "cpu";
                   return in;
                 },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_load_placement(in.c, in.schedule, in.split, in.map_location == "cpu", b);
                 }),
      replayable("DistributedCheckpoint.ResumeEqualsNoInterruption",
                 [] { return split_schedule(/*force_offload=*/false); },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_dist_ckpt_resume(in.c, in.schedule, in.split, b);
                 }),
      replayable("DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState",
                 [] {
                   CaseInputs in;
                   in.c = *gen::case_spec();
                   // Every DP rank is built twice: keep the groups small.
                   in.c.dp = std::min(in.c.dp, kMaxGatheredDp);
                   in.c.expert_dp = std::min(in.c.expert_dp, kMaxGatheredDp);
                   // Megatron's arguments allow the hybrid optimizer only precision-aware; the
                   // other one cannot load these formats at all (finding F8).
                   if (in.c.cpu_offload) in.c.precision_aware = true;
                   in.schedule = *gen::schedule(in.c, 2);
                   in.checkpoint_format = *gen::weighted_choice<std::string>(
                       {{1, "dp_zero_gather_scatter"}, {2, "fully_reshardable"}});
                   if (in.checkpoint_format == "fully_reshardable") {
                     in.other_dp = *gen::weighted_choice<int>(
                         {{2, 0}, {1, *rc::gen::inRange(1, kMaxGatheredDp + 1)}});
                   }
                   return in;
                 },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_gathered_ckpt_round_trip(in.c, in.schedule, gathered_format(in), in.other_dp,
                                                b);
                 }),
      replayable("HybridOptimizerState.CommandSequencesMatchTheReference",
                 draw_hybrid_state_case, check_hybrid_state_case),
      {"FusedAdamDiff.EveryTensorFollowsTheFusedOrderEmptyOnesIncluded",
       [](const sut::Behaviour& b) { run_fused_adam_property(b); }, nullptr},
      // The stream properties last: they cost the most per case.
      replayable("StreamSimulation.NoRaceBetweenStreams",
                 [] {
                   CaseInputs in = case_only();
                   in.c.cpu_offload = true;
                   in.schedule = *gen::schedule(in.c, 3);
                   return in;
                 },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_stream_race_property(in.c, in.schedule, b);
                 }),
      replayable("StreamSimulation.NonBlockingCopiesUsePinnedMemory",
                 [] {
                   CaseInputs in = case_only();
                   in.c.cpu_offload = true;
                   in.schedule = *gen::schedule(in.c, 1);
                   return in;
                 },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_pinned_copies_property(in.c, in.schedule, b);
                 }),
      replayable("StreamSimulation.EveryScheduleGivesTheReferenceParams",
                 [] {
                   CaseInputs in = case_only();
                   in.c.cpu_offload = true;
                   in.schedule = *gen::schedule(in.c, kMaxSteps);
                   return in;
                 },
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   // The adversarial order, then a random one seeded by the case itself (so a
                   // case file replays it).
                   run_numeric_property(in.c, in.schedule, b, NumericClaim::kModelParams,
                                        sim::StreamSchedule{model::streams::Policy::kAdversarial,
                                                            0, true});
                   run_numeric_property(
                       in.c, in.schedule, b, NumericClaim::kModelParams,
                       sim::StreamSchedule{model::streams::Policy::kRandom,
                                           in.schedule.steps.front().grad_seed, true});
                 }),
  };
  return kTable;
}

const PropertyDef* find_diff_property(const std::string& name) {
  for (const PropertyDef& p : diff_properties()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const PropertyDef& diff_property(const std::string& name) {
  if (const PropertyDef* p = find_diff_property(name)) return *p;
  std::cerr << "no property named " << name << "\n";
  std::abort();
}

std::string case_file_dir() {
  const char* dir = std::getenv("SC_CASE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  return ((ec ? std::filesystem::path(".") : tmp) / "shardcheck-cases").string();
}

}  // namespace sc::props
