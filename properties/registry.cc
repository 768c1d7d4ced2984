#include "properties/registry.h"

#include <rapidcheck.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "properties/buffer_groups_props.h"
#include "properties/diff_props.h"
#include "properties/fused_adam_props.h"
#include "properties/gen/case_draws.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"
#include "properties/gen/step_gen.h"
#include "properties/hybrid_state.h"
#include "properties/model_laws.h"
#include "properties/numeric_props.h"
#include "properties/overlap_props.h"
#include "properties/real_code_props.h"
#include "properties/real_ranks_props.h"
#include "properties/scaler_props.h"
#include "properties/shape_props.h"
#include "properties/step_flow_props.h"
#include "properties/support.h"
#include "properties/training_props.h"
#include "properties/wrapper_props.h"
#include "sim/port/deviation.h"

namespace sc::props {

namespace {

using Check = std::function<void(const CaseInputs&, const sut::Behaviour&)>;
using Draw = std::function<CaseInputs()>;

// Against real code: the tree and patches the case ran on, as shardcheck-verify names them in
// SC_MEGATRON_NAME, SC_MEGATRON_COMMIT and SC_MEGATRON_PATCHES (one path a line); else nullopt.
std::optional<RealCodeSource> real_code_source() {
  if (!real_code_under_test()) return std::nullopt;
  const auto var = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v == nullptr ? "" : v);
  };
  RealCodeSource s{var("SC_MEGATRON_NAME"), var("SC_MEGATRON_COMMIT"), {}};
  if (s.tree.empty()) s.tree = megatron_tree()->tree;
  std::istringstream patches(var("SC_MEGATRON_PATCHES"));
  for (std::string line; std::getline(patches, line);) {
    if (!line.empty()) s.patches.push_back(line);
  }
  return s;
}

// Writes the failing case to the case-file folder and logs where, with the command that replays
// it on the port (against real code shardcheck-verify prints the one that replays it there).
// Shrinking runs failing cases one after the other: the last file written is the shrunk case
// that RapidCheck reports. The JSON is logged only when the file could not be written.
void record_failure(const std::string& property, const std::vector<std::string>& extras,
                    const sut::Behaviour& b, const CaseInputs& in) {
  const CaseFile file{property, b.name, in, real_code_source(), extras};
  const std::string text = to_json(file);
  std::error_code ec;
  const std::filesystem::path dir(case_file_dir());
  std::filesystem::create_directories(dir, ec);
  const std::string side = file.megatron ? "megatron" : b.name;
  const std::filesystem::path path = dir / (property + "." + side + ".json");
  std::ofstream out(path);
  out << text;
  if (!out.good()) {
    RC_LOG() << "case file: (not written: " << path.string() << ")\n" << text;
  } else if (file.megatron) {
    RC_LOG() << "case file: " << path.string() << "\n";
  } else {
    RC_LOG() << "case file: " << path.string() << "\nreplay: shardcheck-replay " << path.string()
             << "\n";
  }
}

// A property of the variant under test that draws a CaseInputs with `draw` and runs `check` on
// it, recording the case when the check fails (a discarded case is not a failure).
// `extras`: the keys of the extras `draw` sets (properties/case_extras.h).
Property replayable(std::string name, std::string claim, std::vector<std::string> killers,
                    Draw draw, Check check, std::vector<std::string> extras = {}) {
  auto body = [name, extras, draw, check](const sut::Behaviour& b) {
    const CaseInputs in = draw();
    try {
      check(in, b);
    } catch (const rc::detail::CaseResult& r) {
      if (r.type == rc::detail::CaseResult::Type::Failure) record_failure(name, extras, b, in);
      throw;
    } catch (...) {
      record_failure(name, extras, b, in);
      throw;
    }
  };
  Property p;
  p.name = std::move(name);
  p.claim = std::move(claim);
  p.killers = std::move(killers);
  p.body = body;
  p.check = std::move(check);
  p.draw = std::move(draw);
  p.extras = std::move(extras);
  return p;
}

// A law of the model alone, shown to fail on bad input by `strength_tests`.
Property model_law(std::string name, std::string claim, std::vector<std::string> strength_tests,
                   void (*law)()) {
  Property p;
  p.name = std::move(name);
  p.claim = std::move(claim);
  p.target = Target::kModel;
  p.not_on_real_code = "a law of the model alone";
  p.strength_tests = std::move(strength_tests);
  p.body = [law](const sut::Behaviour&) { law(); };
  return p;
}

// Why a property of a kernel of ours does not run against real Megatron code.
constexpr const char* kOwnKernel =
    "checks a kernel of the port or of our offload engines on its own, which is not Megatron "
    "code";

Property port_only(Property p, std::string why) {
  p.not_on_real_code = std::move(why);
  return p;
}

// `p`, which needs `capabilities` of a system under test.
Property needing(Property p, std::vector<rig::Capability> capabilities) {
  p.needs = std::move(capabilities);
  return p;
}

// A property whose inputs do not fit a CaseInputs: drawn and checked in `body`.
Property drawn_in_body(std::string name, std::string claim, std::vector<std::string> killers,
                       void (*body)(const sut::Behaviour&)) {
  Property p;
  p.name = std::move(name);
  p.claim = std::move(claim);
  p.killers = std::move(killers);
  p.body = body;
  return p;
}

rig::GatheredFormat gathered_format(const CaseInputs& in) {
  if (in.checkpoint_format == "dp_zero_gather_scatter") return rig::GatheredFormat::kDpZero;
  RC_ASSERT(in.checkpoint_format == "fully_reshardable");
  return rig::GatheredFormat::kFullyReshardable;
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

void every_schedule(const CaseInputs& in, const sut::Behaviour& b) {
  // The adversarial order, then a random one seeded by the case itself (so a case file
  // replays it).
  run_numeric_property(in.c, in.schedule, b, NumericClaim::kModelParams,
                       rig::StreamSchedule{model::streams::Policy::kAdversarial, 0, true});
  run_numeric_property(in.c, in.schedule, b, NumericClaim::kModelParams,
                       rig::StreamSchedule{model::streams::Policy::kRandom,
                                           in.schedule.steps.front().grad_seed, true});
}

std::vector<Property> model_laws() {
  return {
      model_law("ShardBuilderModel.RankShardsTileThePaddedBucketAndOwnEachElementOnce",
                "rank ranges tile each padded bucket; each parameter element is owned by "
                "exactly one rank",
                {"CheckStrength.OwnershipCheckCatchesAShrunkenParameter",
                 "CheckStrength.OwnershipCheckCatchesARaggedBucket"},
                shard_ownership_law),
      model_law("ShardBuilderModel.LayoutFollowsAlignmentOrderAndBucketRules",
                "64-element starts, reverse order, least padding to lcm(dp,128), contiguous "
                "buckets, shared embedding alone, bucket-size rule",
                {"CheckStrength.LayoutRuleCheckCatchesMisalignmentOrderAndDivisor"},
                layout_rules_law),
      model_law("OffloadPlanModel.GreedyPrefixMonotoneInTheFraction",
                "the offload plan is the shortest prefix reaching the target, monotone, 0 "
                "nothing, 1 everything",
                {"CheckStrength.OffloadLawsRejectAThresholdTestedAfterAdding"},
                offload_prefix_law),
  };
}

std::vector<Property> shard_builder_properties() {
  Property upstream_ranks = replayable(
      "ShardBuilderDiff.UpstreamFailsExactlyOnRanksOwningAnFp32Piece",
      "under upstream, the failing ranks are the model's prediction", {"pr6982"}, gen::case_only,
      diff(DiffClaim::kUpstreamFailingRanks));
  upstream_ranks.target = Target::kOwnVariant;
  upstream_ranks.own_variant = "upstream";
  upstream_ranks.not_on_real_code =
      "a claim about the port's `upstream`; a tree's failing ranks are checked by the "
      "construction and differential properties";
  return {
      replayable("ShardBuilderDiff.PortRangesEqualModelOnEveryRank",
                 "the port's four ranges equal the model's",
                 {"MEG-03", "RULE-align-32", "RULE-align-off-by-one", "RULE-lcm-product",
                  "RULE-forward-order"},
                 gen::case_only, diff(DiffClaim::kRanges)),
      replayable("ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing",
                 "leaf, dtype, size, aliasing and offset, main param, index map, as planned",
                 {"upstream", "MEG-01", "MEG-02"}, gen::case_only, diff(DiffClaim::kInstalled)),
      replayable("ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank",
                 "construction succeeds", {"upstream", "MEG-01"}, gen::case_only,
                 diff(DiffClaim::kConstructs)),
      upstream_ranks,
  };
}

std::vector<Property> hybrid_optimizer_properties() {
  return {
      replayable("HybridOptimizerDiff.ModelParamsEqualTheReferenceAfterEveryStep",
                 "after each of 1 to 8 steps (zero, tiny, large grads; lr and wd changing) "
                 "every owned piece equals the reference, bit for bit",
                 {"patched-F1", "DS-01", "DS-03", "DS-05", "HDO-08", "RULE-pa-no-master-weights",
                  "RULE-threshold-after-adding", "TORCH-113-moment"},
                 gen::case_and_schedule, numeric(NumericClaim::kModelParams)),
      replayable("HybridOptimizerDiff.OptimizerStateEqualsTheReference",
                 "`exp_avg`, `exp_avg_sq`, `step` and the fp32 master equal the reference, bit "
                 "for bit",
                 {"DS-04", "HDO-07"}, gen::case_and_schedule, numeric(NumericClaim::kState)),
      replayable("HybridOptimizerDiff.PlacementEqualsTheOffloadPlan",
                 "offloaded, fp32 copy, pinned, host sub-optimizer index as planned (grouped as "
                 "proposal S1 "
                 "groups them where the hybrid optimizer has an "
                 "`overlap_cpu_optimizer_min_numel`)",
                 {"HDO-07"}, gen::offloaded_case, numeric(NumericClaim::kPlacement)),
      replayable("HybridOptimizerDiff.ZeroLrAndWeightDecayLeaveParamsUnchanged",
                 "lr 0 and wd 0 leave every parameter bit-identical", {"DS-01"}, gen::zero_lr_case,
                 numeric(NumericClaim::kUnchanged)),
      replayable("HybridOptimizerDiff.OffloadFractionDoesNotChangeTheResult",
                 "two fractions agree within the operation-order tolerance",
                 {"patched-F1", "DS-01"}, gen::two_fractions_case,
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_offload_invariance(in.c, in.schedule, b, in.other_fraction);
                 },
                 {"other_fraction"}),
      replayable("HybridOptimizerDiff.HdoAtFractionOneEqualsThePlainOptimizer",
                 "the hybrid optimizer with everything on the host equals the plain AdamW path "
                 "within the named tolerance between torch 2.11's fused and single-tensor CPU "
                 "AdamW",
                 {"DS-06", "HDO-07"}, gen::case_and_schedule,
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_hdo_against_plain(in.c, in.schedule, b);
                 }),
      replayable(
          "HybridOptimizerDiff.SaveLoadContinueEqualsNoInterruption",
          "save, load into a fresh optimizer: right after the load its whole state "
          "(moments, masters, stepped tensors, step counts, hyper-parameters) equals the "
          "saved one; "
          "continue: bit-identical to no interruption",
          {"patched-F2", "patched-F10", "HDO-05"},
          [] { return gen::split_schedule(/*force_offload=*/true); },
          [](const CaseInputs& in, const sut::Behaviour& b) {
            run_save_load_continue(in.c, in.schedule, in.split, b);
          },
          {"split"}),
      replayable("HybridOptimizerDiff.LoadedStateLivesOnItsSubOptimizersDevice",
                 "save, then load into a fresh optimizer a state dict read with "
                 "`map_location=\"cpu\"` or where it was saved: every tensor of `hdo.state` and "
                 "every stepped tensor lives on its sub-optimizer's device (the host for a piece "
                 "the model's offload plan offloads, the accelerator otherwise) and the whole "
                 "state equals the saved one; then continue: bit-identical to no interruption",
                 {"PT-03", "patched-F2"}, gen::mapped_load_case,
                 [](const CaseInputs& in, const sut::Behaviour& b) {
                   run_load_placement(in.c, in.schedule, in.split, in.map_location == "cpu", b);
                 },
                 {"split", "map_location"}),
  };
}

std::vector<Property> whole_param_properties() {
  return {port_only(
      drawn_in_body("HybridOptimizerDirect.WholeParamsOfEveryShapeMatchTheReference",
                    "the hybrid optimizer on whole parameters of every shape, as a library "
                    "user builds it (no distributed optimizer): the offload split equals the "
                    "model's plan and after every step every parameter equals the model's "
                    "AdamW in its sub-optimizer's order, bit for bit",
                    {"PIPE-first-dim", "SHAPE-fused-first-dim"}, run_hdo_whole_params_property),
      "the Megatron worker drives the hybrid optimizer through the distributed optimizer only")};
}

void found_inf_body(const sut::Behaviour& b) {
  const FoundInfDraw d = draw_found_inf();
  run_found_inf_property(d.c, d.s, d.scaler, d.injected, b);
}

// Clipping off, or `clip_grad` a multiple of the first step's norm: far below it (every step
// clips, tiny grads become zeros), near it, or above it (no step clips).
void grad_stats_body(const sut::Behaviour& b) {
  const model::CaseSpec c = *gen::case_spec();
  const gen::Schedule s = *gen::schedule(c, gen::kMaxSteps);
  const double factor =
      *gen::weighted_choice<double>({{1, 0.0}, {2, 1e-3}, {1, 0.25}, {1, 1.0}, {1, 4.0}});
  const bool log_num_zeros = *gen::weighted_choice<bool>({{2, true}, {1, false}});
  std::optional<model::GradScalerConfig> scaler;
  if (*gen::weighted_choice<bool>({{2, false}, {1, true}})) {
    scaler = *rc::gen::resize(rc::kNominalSize, factory_scaler());
  }
  const float tiny = std::numeric_limits<float>::denorm_min();
  const auto injected = *injected_grads(c, s, 4, {0.0f, -0.0f, tiny, -tiny});
  run_grad_stats_property(c, s, factor, log_num_zeros, scaler, injected, b);
}

void direct_grad_norm_body(const sut::Behaviour& b) {
  run_direct_grad_norm_property(*direct_grad_norm_call(), b);
}

std::vector<Property> step_flow_properties() {
  return {
      drawn_in_body("StepFlow.NonFiniteGradsSkipTheStepAndTheScalerFollowsTheModel",
                    "with Megatron's loss scaler (dynamic or constant) the scaled grads are "
                    "unscaled and checked for inf/NaN over the DP group: a step with one "
                    "anywhere in the instance (injected, or an fp16 grad the scale overflows) "
                    "changes no parameter, master, moment or step count on any rank, host or "
                    "accelerator; every other step equals the reference bit for bit; the "
                    "scaler's scale and trackers equal the model's after every step",
                    {"MP-found-inf-not-reduced", "MP-step-despite-inf"}, found_inf_body),
      drawn_in_body("StepFlow.ClippingAndZeroCountEqualTheModel",
                    "with `clip_grad` and `log_num_zeros_in_grad`, with or without a loss "
                    "scaler (a step it skips reports no statistics): the step's global grad "
                    "norm is within the named summation-order tolerance of the exact norm "
                    "with every main-grad element of the instance counted once (offload and "
                    "precision-aware decoupled grads included), the zero count after "
                    "clipping equals the model's exactly, and every piece and its state "
                    "equal the reference clipped by the reported norm's coefficient, bit "
                    "for bit",
                    {"CLIP-norm-not-reduced", "CLIP-always-scaled", "CLIP-pa-reads-grad",
                     "ZEROS-counted-before-clipping", "CLIP-before-unscale"},
                    grad_stats_body),
      drawn_in_body("StepFlow.DirectGradNormOfEveryTypeEqualsTheModel",
                    "`get_grad_norm_fp32` called directly, as callers outside the optimizer "
                    "call it, on every rank of a group of 1 to 4 ranks, each with its own fp32 "
                    "grads or none, with norm type 2, inf, 1 or 3: no rank raises, every rank "
                    "returns the same norm, and it is the exact norm of all the ranks' grads "
                    "(the inf norm exactly, the others within the named summation-order "
                    "tolerance)",
                    {"patched-F17"}, direct_grad_norm_body),
      port_only(drawn_in_body("GradScalerDiff.UpdatesAndReloadsMatchTheModel",
                              "Megatron's constant and dynamic loss scalers over drawn arguments "
                              "and sequences of steps with finite or non-finite grads and "
                              "state-dict round trips: the port refuses exactly the arguments "
                              "the model calls invalid, and after every command the scale, "
                              "`inv_scale` (bit for bit) and both trackers equal the model's",
                              {"SCALER-hysteresis-every-finite-step", "SCALER-no-min-scale",
                               "SCALER-growth-tracker-kept"},
                              run_grad_scaler_property),
                "it drives the port's scaler classes alone; against real code Megatron's "
                "scaler runs inside the step-flow property")};
}

Check training(TrainingClaim claim) {
  return [claim](const CaseInputs& in, const sut::Behaviour& b) {
    run_training_property(in.c, in.schedule, b, claim);
  };
}

std::vector<Property> optimizer_wrapper_properties() { return {wrapper_lifecycle_property()}; }

std::vector<Property> ddp_properties() {
  Property p = replayable(kBufferGroupsName, kBufferGroupsClaim, {}, direct_caller_case,
                          run_buffer_groups_property);
  p.not_on_port = kBufferGroupsNotOnPort;
  p.history_killers = {"G17"};
  return {p, overlap_property()};
}

std::vector<Property> training_loop_properties() {
  return {
      needing(
          replayable("TrainingLoop.EveryParamReceivesItsGradThroughDdp",
                     "in a training loop (the parameters in a module under DDP's grad hooks; each "
                     "step's gradient from a forward and backward pass), after construction and "
                     "after every step every parameter is a leaf that requires grad, DDP's hook "
                     "leaves `.grad` None and exactly the gradient in `main_grad`, and every piece "
                     "equals the reference bit for bit",
                     {"TRAIN-seed-fix-detaches-param", "TRAIN-zero-skips-expert-buffers"},
                     gen::case_and_schedule, training(TrainingClaim::kGradsReachMainGrads)),
          {rig::Capability::kTrainingLoop}),
      needing(replayable(
                  "TrainingLoop.ZeroGradClearsWhatTheNextBackwardAddsTo",
                  "in a training loop, two backward passes add up in `main_grad` (in its dtype), "
                  "and after the train step's zeroing (each chunk's `zero_grad_buffer`, then "
                  "`zero_grad`) the next backward leaves exactly its own gradient",
                  {"TRAIN-zero-skips-expert-buffers", "TRAIN-seed-fix-detaches-param"},
                  gen::case_and_schedule, training(TrainingClaim::kZeroGradClearsAccumulation)),
              {rig::Capability::kTrainingLoop}),
  };
}

std::vector<Property> checkpoint_properties() {
  return {
      needing(replayable(
                  "DistributedCheckpoint.ResumeEqualsNoInterruption",
                  "a DP group saves a distributed checkpoint and a fresh group resumes from it "
                  "as Megatron does (`sharded_state_dict(is_loading=True)`, in-place fill, "
                  "`load_state_dict`; the param state `fully_sharded_model_space` on the port, "
                  "`dp_reshardable` on real code): right after the load the whole optimizer state "
                  "(moments, masters, step counts, each group's hyper-parameters) equals the "
                  "saved one; then continue: model pieces, masters, moments and step "
                  "bit-identical to no interruption, for torch AdamW, precision-aware FusedAdam "
                  "and the hybrid optimizer",
                  {"patched-F5", "PT-04", "MEG-06", "MEG-07"},
                  [] { return gen::split_schedule(/*force_offload=*/false); },
                  [](const CaseInputs& in, const sut::Behaviour& b) {
                    run_dist_ckpt_resume(in.c, in.schedule, in.split, b);
                  },
                  {"split"}),
              {rig::Capability::kDistributedCheckpoints, rig::Capability::kNonTensorState}),
      needing(replayable(
                  "DistributedCheckpoint.GatheredFormatsRoundTripTheOptimizerState",
                  "every DP rank of each instance steps, the group is saved in "
                  "`dp_zero_gather_scatter` or `fully_reshardable` (world tensors gathered on DP "
                  "rank 0, bucket-end padding stripped; the latter cut into model-space tensors), "
                  "and a fresh group (other initial values; for `fully_reshardable` often another "
                  "DP size) loads it: every element of every parameter's `exp_avg`, `exp_avg_sq` "
                  "and fp32 master comes back bit for bit, and every piece's step count; against "
                  "real code on real ranks (dp 1, 2 or 4, one worker each over Gloo): Megatron's "
                  "`torch` format and its `torch_dist` checkpoint sharded `fully_reshardable`",
                  {"patched-F7", "patched-F8", "patched-F9", "MEG-04", "DS-07"},
                  [] { return gen::gathered_case(/*on_real_ranks=*/real_code_under_test()); },
                  [](const CaseInputs& in, const sut::Behaviour& b) {
                    if (!real_code_under_test()) {
                      run_gathered_ckpt_round_trip(in.c, in.schedule, gathered_format(in),
                                                   in.other_dp, b);
                      return;
                    }
                    run_real_ranks_round_trip(in.c, in.schedule, gathered_format(in), in.other_dp,
                                              b, tree_or_fail());
                  },
                  {"checkpoint_format", "other_dp"}),
              {rig::Capability::kGatheredCheckpoints}),
      replayable("HybridOptimizerState.CommandSequencesMatchTheReference",
                 "`rc::state` sequences of Step, SetLr/SetWd, ZeroGrad, SaveState, "
                 "Rebuild+LoadState, ReloadModelParams agree with the reference after every "
                 "command, bit for bit",
                 {"patched-F2", "patched-F3", "patched-F11"}, draw_hybrid_state_case,
                 check_hybrid_state_case, {"rank", "commands"}),
  };
}

// A property of real ranks resumed from a gathered checkpoint of `format`.
Property real_ranks_resume(const char* name, const std::string& save, const std::string& port,
                           std::vector<std::string> killers, RealRanksCheckpoint checkpoint) {
  Property p = replayable(
      name,
      "real code on one worker process per DP rank: the group steps, " + save +
          "; nothing raises, and right after the load and after every later step each rank "
          "holds what it holds never interrupted, bit for bit, and the port resumed from " +
          port +
          " holds the same; torch AdamW, precision-aware FusedAdam and the precision-aware "
          "hybrid optimizer",
      std::move(killers), gen::real_ranks_resume_case,
      [checkpoint](const CaseInputs& in, const sut::Behaviour& b) {
        run_real_ranks_resume(in.c, in.schedule, in.split, checkpoint, b, tree_or_fail());
      },
      {"split"});
  p.target = Target::kPortVsRealCode;
  return p;
}

std::vector<Property> kernel_and_stream_properties() {
  return {
      port_only(drawn_in_body("FusedAdamDiff.EveryTensorFollowsTheFusedOrderEmptyOnesIncluded",
                              "FusedAdam over lists with empty tensors (last too) and more than "
                              "one launch equals the reference",
                              {"PT-01", "FID-bc-double-beta"}, run_fused_adam_property),
                kOwnKernel),
      port_only(drawn_in_body("TensorShapes.FusedAdamStepsEveryShapeElementByElement",
                              "FusedAdam on multi-dimensional, zero-size and boundary-sized "
                              "tensors (4-wide loads, 65536-element chunks) equals the "
                              "reference element by element; a strided parameter or grad raises "
                              "multi-tensor apply's \"A tensor was not contiguous.\" and "
                              "changes nothing",
                              {"SHAPE-fused-first-dim"}, run_fused_adam_shapes_property),
                kOwnKernel),
      port_only(drawn_in_body("TensorShapes.FusedHostAdamWEqualsLibTorchOnEveryShape",
                              "the fused host AdamW on multi-dimensional, zero-size, strided "
                              "and boundary-sized tensors (vector widths, parallel grain) "
                              "equals torch's fused CPU AdamW (`fused=True`, what it replaces) "
                              "on the same logical values, bit for bit: parameters and both "
                              "moments",
                              {"ENG-strided-fast-path"}, run_fused_host_adamw_shapes_property),
                kOwnKernel),
      // The stream properties last: they cost the most per case.
      needing(
          replayable("StreamSimulation.NoRaceBetweenStreams",
                     "in the stream simulation (for the real code: under the worker's stream-order "
                     "checker), no two operations of the step flow touch one region (one writing) "
                     "without streams or events ordering them",
                     {"patched-F6", "HDO-01", "STREAM-no-d2h-wait", "PIPE-no-staging-wait",
                      "PIPE-no-chunk-wait"},
                     gen::offloaded_steps(3),
                     [](const CaseInputs& in, const sut::Behaviour& b) {
                       run_stream_race_property(in.c, in.schedule, b);
                     }),
          {rig::Capability::kStreamRaces}),
      needing(replayable(
                  "StreamSimulation.NonBlockingCopiesUsePinnedMemory",
                  "with the pin flags on, every non-blocking copy of the step flow has pinned host "
                  "memory on its host side (on CUDA `is_pinned()`; on the CPU, where nothing can "
                  "be pinned, what the port would pin)",
                  {"patched-pr4547", "HDO-02"}, gen::offloaded_steps(1),
                  [](const CaseInputs& in, const sut::Behaviour& b) {
                    run_pinned_copies_property(in.c, in.schedule, b);
                  }),
              {rig::Capability::kPinnedCopyRecords}),
      needing(
          replayable("StreamSimulation.EveryScheduleGivesTheReferenceParams",
                     "run in the latest order the streams allow and in a random legal order, every "
                     "owned piece equals the reference bit for bit",
                     {"patched-F6", "HDO-01", "PIPE-no-chunk-wait"},
                     gen::offloaded_steps(gen::kMaxSteps), every_schedule),
          {rig::Capability::kChosenStreamOrder}),
  };
}

// Why the real-ranks properties do not run in a plain run against real code.
const char* const kOnRealRanks =
    "it runs the real code itself, on real ranks beside the port: left out of this run "
    "(verify-megatron runs it unless --no-real-ranks; shardcheck-verify with --real-ranks "
    "VARIANT)";

std::vector<Property> real_code_properties() {
  Property diff = replayable(
      "RealCodeDiff.PortEqualsMegatronBitForBit",
      "the port under the variant and real Megatron code from a tree (SC_MEGATRON_TREE; with "
      "Transformer Engine, its FusedAdam is the worker's stand-in), same initial values and "
      "steps: construction (outcome, error, ranges, installed tensors, index map, bytes) and, "
      "after every step, every piece, master, moment, step and placement agree bit for bit",
      {"MEG-02", "MEG-03", "DS-06", "RULE-align-32", "RULE-threshold-after-adding",
       "TORCH-113-moment"},
      gen::case_and_schedule, [](const CaseInputs& in, const sut::Behaviour& b) {
        run_port_vs_real_code(in.c, in.schedule, b, tree_or_fail());
      });
  diff.target = Target::kPortVsRealCode;
  diff.not_on_real_code =
      "it runs the port and the real code side by side: left out of this run (verify-megatron "
      "runs it unless --no-real-ranks; shardcheck-verify with --real-ranks VARIANT)";
  Property ranks = replayable(
      "RealRanks.MultiProcessEqualsOneProcessAndPort",
      "real code on one worker process per DP rank over Gloo (its DDP reduce-scatters the "
      "grads, its optimizer all-gathers the params): after construction and every step each "
      "rank holds what the one-process emulation and the port hold, bit for bit, and every "
      "rank's full parameters equal every other's and the owners' stepped pieces",
      {"MEG-02"}, gen::real_ranks_case, [](const CaseInputs& in, const sut::Behaviour& b) {
        run_real_ranks(in.c, in.schedule, b, tree_or_fail());
      });
  ranks.target = Target::kPortVsRealCode;
  ranks.not_on_real_code = kOnRealRanks;
  Property resume = real_ranks_resume(
      "RealRanks.TorchFormatResumeEqualsNoInterruption",
      "saves Megatron's `torch` format (each rank's `state_dict()`, the param state gathered on "
      "DP rank 0 over Gloo) and a fresh group loads it as `load_checkpoint` does (weights, "
      "`load_state_dict`, `load_parameter_state_from_dp_zero`)",
      "`dp_zero_gather_scatter`", {"patched-F8", "patched-F9", "DS-07"},
      RealRanksCheckpoint::kTorch);
  Property reshardable = real_ranks_resume(
      "RealRanks.FullyReshardableResumeEqualsNoInterruption",
      "saves Megatron's distributed checkpoint with the `fully_reshardable` optimizer sharding "
      "(the param state all-gathered over Gloo and cut into model-space tensors, each rank's "
      "main replicas written to a directory the ranks share) and a fresh group loads it "
      "(`load_parameter_state_from_fully_reshardable`)",
      "`fully_reshardable`", {"patched-F7", "MEG-04"}, RealRanksCheckpoint::kFullyReshardable);
  Property dp_reshardable = real_ranks_resume(
      "RealRanks.DpReshardableResumeEqualsNoInterruption",
      "saves Megatron's distributed checkpoint with its default `dp_reshardable` optimizer "
      "sharding (each rank's bucket shards, in a directory the ranks share) and a fresh group "
      "loads it",
      "its distributed checkpoint (`fully_sharded_model_space`: it has no `dp_reshardable`)",
      {"patched-F5", "PT-04"}, RealRanksCheckpoint::kDpReshardable);
  Property reshard = replayable(
      "RealRanks.FullyReshardableLoadsAtAnotherDpSize",
      "real code on one worker process per DP rank: a group of dp 2 or 4 steps and saves "
      "Megatron's distributed checkpoint with the `fully_reshardable` optimizer sharding, and a "
      "fresh group of the other size loads it: every element of every parameter's `exp_avg`, "
      "`exp_avg_sq` and fp32 master and every piece's step count come back bit for bit, and "
      "right after the load and after every later step the port, resharded the same way, holds "
      "what the loading ranks hold",
      {"patched-F7", "MEG-04"}, gen::real_ranks_reshard_case,
      [](const CaseInputs& in, const sut::Behaviour& b) {
        run_real_ranks_reshard(in.c, in.schedule, in.split, in.other_dp, b, tree_or_fail());
      },
      {"split", "checkpoint_format", "other_dp"});
  reshard.target = Target::kPortVsRealCode;
  resume.not_on_real_code = reshardable
                                .not_on_real_code = dp_reshardable
                                                        .not_on_real_code = reshard
                                                                                .not_on_real_code =
                                                                                    kOnRealRanks;
  return {diff, ranks, resume, reshardable, dp_reshardable, reshard};
}

std::string killed_by(const Property& p) {
  std::string out;
  for (const std::string& k : p.killers) out += (out.empty() ? "`" : ", `") + k + "`";
  for (const std::string& t : p.strength_tests) out += (out.empty() ? "`" : ", `") + t + "`";
  for (const std::string& g : p.history_killers) {
    out += (out.empty() ? "`" : ", `") + g + "` (history)";
  }
  return out;
}

}  // namespace

const std::vector<Property>& all_properties() {
  static const std::vector<Property> kAll = [] {
    std::vector<Property> out;
    for (auto part : {model_laws, shard_builder_properties, hybrid_optimizer_properties,
                      whole_param_properties, step_flow_properties, training_loop_properties,
                      checkpoint_properties, optimizer_wrapper_properties, ddp_properties,
                      kernel_and_stream_properties,
                      real_code_properties}) {
      for (Property& p : part()) out.push_back(std::move(p));
    }
    return out;
  }();
  return kAll;
}

const Property* find_property(std::string_view name) {
  for (const Property& p : all_properties()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<const Property*> variant_properties() {
  std::vector<const Property*> out;
  for (const Property& p : all_properties()) {
    if (p.target == Target::kVariant && p.not_on_port.empty()) out.push_back(&p);
  }
  return out;
}

std::string why_not_on_real_code(const Property& p) {
  if (!p.not_on_real_code.empty()) return p.not_on_real_code;
  std::string why;
  for (const rig::Capability c : p.needs) {
    if (rig::capability(c).on_real_code) continue;
    why += (why.empty() ? "" : "; ") + rig::not_on_real_code_reason(c);
  }
  return why;
}

bool runs_on_real_code(const Property& p) {
  return p.target == Target::kVariant && why_not_on_real_code(p).empty();
}

std::string property_table_markdown() {
  std::ostringstream out;
  out << "| property | claim | killed by | against real Megatron |\n| --- | --- | --- | --- |\n";
  for (const Property& p : all_properties()) {
    out << "| `" << p.name << "` | " << p.claim << " | " << killed_by(p) << " | "
        << (runs_on_real_code(p) ? "yes" : "no: " + why_not_on_real_code(p)) << " |\n";
  }
  return out.str();
}

std::string mutant_table_markdown() {
  std::ostringstream out;
  out << "| mutant | built on | re-injected bug | killed by |\n| --- | --- | --- | --- |\n";
  for (const sut::DeviationRow& r : sut::deviation_table()) {
    if (r.kind != sut::DeviationKind::kMutant) continue;
    std::string killers;
    for (const Property& p : all_properties()) {
      if (std::find(p.killers.begin(), p.killers.end(), r.name) == p.killers.end()) continue;
      killers += (killers.empty() ? "`" : ", `") + p.name + "`";
    }
    out << "| `" << r.name << "` | `" << r.base << "` | " << r.doc << " | " << killers << " |\n";
  }
  return out.str();
}

std::string case_file_dir() {
  const char* dir = std::getenv("SC_CASE_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  return ((ec ? std::filesystem::path(".") : tmp) / "shardcheck-cases").string();
}

}  // namespace sc::props
