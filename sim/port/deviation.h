// The deviation table: every named way the port may differ from Megatron-Core at d8b71082, one
// row each. A fix (one per finding of FINDINGS.md, or a Megatron pull request) or one of our
// offload engines is a change a variant names; a mutant is a variant with one known bug
// re-injected, which exists only to be killed by the properties. The fixes' rows are the change
// table of docs/variants-and-mutants.md, read by cmake/sc_fix_rows.cmake at configure time (so
// the page is their one source); the engines' and mutants' rows are below. Everything else is
// derived from the rows: the fully patched variant, the old chain names (aliases), the mutant
// list, what tests/variants_test.cc expects and the page's other tables (a test fails when they
// and the rows disagree). Adding a fix costs its row of that table, its port branch, its
// regression case and its patch.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace sc::sut {

// One behaviour the port can switch on. Fixes are named by their finding (kF3) or pull request
// (kPr6982); mutants by the bug they re-inject.
enum class Deviation {
// The fixes: one enumerator per row of the change table of docs/variants-and-mutants.md
// (kPr6982, kF1, ..., kF12), in its order, generated from it at configure time; FINDINGS.md
// describes each finding and its fix.
#define SC_FIX_ROW(flag, ...) flag,
#include "shardcheck/fix_rows.inc"
#undef SC_FIX_ROW
  // Not a fix: an offload engine of ours (sim/engines/). The host sub-optimizers are
  // engines::FusedHostAdamW (one multi-threaded, vectorised pass per step, bit-identical to
  // torch::optim::AdamW) instead of torch::optim::AdamW.
  kFusedHostAdamw,
  // Not a fix: the pipelined offload (sim/engines/pipelined_offload.h), on top of
  // kFusedHostAdamw; Behaviour::pipeline_chunk is its chunk.
  kPipelined,
  // Mutant MEG-02: keep the group index map in grad-buffer order instead of rebuilding it in
  // installed order ([fp32..., 16-bit...]) after `_build_model_and_main_param_groups`.
  kStaleIndexMap,
  // Mutant MEG-03: size each rank's shard of a bucket for twice the DP ranks that the rank loop
  // walks, so trailing elements of every bucket belong to no rank.
  kShardSizeForDoubleDp,
  // Mutant DS-01: FusedAdam's tail loop multiplies the first moment by itself times beta1.
  kDs01TailMomentum,
  // Mutant DS-03: main params are copied back into the bucket at their absolute buffer index
  // (`gbuf_world`) instead of the index inside the bucket, a wrong slice past the first bucket.
  kDs03CopyBackSlice,
  // Mutant DS-04: FusedAdam keeps one step count for all groups, advanced once per group.
  kDs04SharedStep,
  // Mutant DS-06: hyper-parameters synced into sub-optimizer group k come from HDO group k.
  kDs06GroupByPosition,
  // Mutant HDO-05: `_update_fp32_params_by_new_state` looks up every state entry in the fp32
  // map, so a native fp32 parameter raises KeyError on load_state_dict (before PR #6124).
  kHdo05Fp32Lookup,
  // Mutant HDO-07: the factory's param_update_in_fp32 is dropped: host copies of 16-bit shards
  // stay 16-bit and AdamW sizes their moments like them.
  kHdo07NoFp32Update,
  // Mutant HDO-08: the host sub-optimizers are the accelerator's FusedAdam class.
  kHdo08FusedOnHost,
  // Mutant TORCH-113-moment: torch's AdamW steps as on PyTorch 1.13: `fused` is never read and
  // the single-tensor loop updates exp_avg as m*b1 + (1-b1)*g instead of 2.11's
  // `exp_avg.lerp_(grad, 1 - beta1)`.
  kTorch113Moment,
  // Mutant PT-01: the multi-tensor FusedAdam skips its final flush when the last tensor of a
  // group is empty, so the tensors batched before it are never updated.
  kPt01SkipFlush,
  // Mutant FID-bc-double-beta: FusedAdam's bias corrections computed from the double betas, not
  // from the float betas Transformer Engine's host code receives (the port's own first version).
  kBcDoubleBetas,
  // Mutant PT-03 (pytorch/pytorch#103256, the class of `step` left on the device the state dict
  // was mapped to): load_state_dict leaves the hybrid optimizer's state where the state dict was
  // mapped (no cast to the device of the parameter it is keyed by) and the post-load hook no
  // longer moves it to the device of its sub-optimizer (`_move_new_state_to_right_device`).
  kPt03StateStaysWhereLoaded,
  // Rule mutants (our own, one per layout or offload rule of the model):
  // parameter starts aligned to 32 elements instead of 64;
  kAlign32,
  // parameter starts aligned to 63 elements instead of 64 (off by one);
  kAlignOffByOne,
  // bucket ends padded to dp * 128 instead of lcm(dp, 128);
  kBucketPadProduct,
  // parameters laid out in list order instead of reversed;
  kForwardOrder,
  // the offload threshold tested after adding the tensor;
  kThresholdAfterAdding,
  // precision-aware without offload, the FusedAdam built without master weights (a 16-bit
  // parameter stepped in its own dtype, its low bits lost every step).
  kPaNoMasterWeights,
  // Mutant HDO-01: the copy-back event is recorded on the D2H stream, not the H2D one.
  kHdo01WrongStream,
  // Stream mutant: the D2H stream does not wait for the current stream before the grad copies.
  kNoD2hWait,
  // Mutant PT-04: the distributed-checkpoint loader ("fully_sharded_model_space") reads the
  // saved per-param list as if each optimizer group's params were contiguous in it (group by
  // group), while it was saved in buffer order.
  kPt04GroupOrder,
  // Mutant DS-05 (analogue): main params are copied into a 16-bit param buffer at fp32-sized
  // offsets (twice the element index), the width error of half-precision CPU Adam.
  kDs05Fp32Stride,
  // Mutant DS-07: load_parameter_state_from_dp_zero advances through the packed world tensors by
  // each bucket's padded size, as if the end padding had been saved.
  kDs07DpZeroPaddedOffsets,
  // Mutant MEG-06: `lr_mult` dropped from the identifier keys that load_state_dict matches saved
  // param groups by, so groups that differ only in it collide and one takes the other's
  // hyper-parameters.
  kMeg06DropLrMult,
  // Mutant MEG-07 (before PR #3537): `_get_main_param_and_optimizer_states` and
  // `_set_main_param_and_optimizer_states` take every entry of a param's optimizer state, the
  // non-tensor ones (e.g. `found_inf: bool`) too, and apply tensor operations to them.
  kMeg07NonTensorState,
  // Mutant SHAPE-fused-first-dim: FusedAdam's kernel counts a tensor's elements as its first
  // dimension (`size(0)` for `numel()`), so only the first row of a multi-dimensional parameter
  // is stepped; the distributed optimizer's flat shards never show it.
  kFusedFirstDimOnly,
  // Scaler mutants (our own, one per rule of the dynamic loss scaler): the hysteresis count
  // restored after every step with finite grads (DeepSpeed's `consecutive_hysteresis`, not
  // Megatron's rule);
  kScalerHysteresisEveryFiniteStep,
  // the backoff not held at the minimum scale;
  kScalerNoMinScale,
  // the growth tracker not reset by a step with non-finite grads.
  kScalerGrowthTrackerKept,
  // Mutant MP-found-inf-not-reduced: the found-inf flag is not MAX-reduced over the grad-stats
  // group, so a rank whose own shards are finite steps while the others skip.
  kFoundInfNotReduced,
  // Mutant MP-step-despite-inf: the step goes on after inf/NaN was found (the scaler still
  // backs off).
  kStepDespiteInf,
  // Gradient-statistics mutants (our own): the squared norm not SUM-reduced over the grad-stats
  // group (each rank clips by its own shards' norm);
  kClipNormNotReduced,
  // the grads multiplied by the coefficient even when it is 1 or more (scaled up);
  kClipAlwaysScaled,
  // precision-aware, the norm and the clipping read `.grad` instead of `.decoupled_grad`;
  kClipPaReadsGrad,
  // the zeros counted before the clipping, which can turn tiny grads into zeros;
  kZerosBeforeClipping,
  // the norm taken and the grads clipped before the loss scale is taken out.
  kClipBeforeUnscale,
  // Mutants of the training loop (Target::training_loop): TRAIN-seed-fix-detaches-param, a wrong
  // fix of the seed bug that detaches the fp32 model parameter itself in place before slicing
  // its shard (construction, leafness, aliasing and steps stay right; the parameter no longer
  // receives gradients);
  kDetachModelParam,
  // TRAIN-zero-skips-expert-buffers: DDP's zero_grad_buffer zeroes `self.buffers` only, so the
  // expert buffers' main grads accumulate across iterations.
  kZeroGradBufferSkipsExpert,
  // Mutant PIPE-no-staging-wait: the host writes a chunk's 16-bit staging buffer without waiting
  // for the H2D copy of the chunk that used it before.
  kPipeNoStagingWait,
  // Mutant PIPE-no-chunk-wait: the host steps a chunk without waiting for its grad's D2H copy.
  kPipeNoChunkWait,
  // Mutant PIPE-first-dim: the pipelined offload cuts each tensor into chunks over its first
  // dimension's length instead of its element count.
  kPipeFirstDimOnly,
  // Mutant ENG-strided-fast-path: the fused host AdamW takes its one-pass path for strided views
  // too, reading `numel()` elements from the view's first element in memory order.
  kEngStridedFastPath,
  kCount
};

inline constexpr size_t kDeviationCount = static_cast<size_t>(Deviation::kCount);

enum class DeviationKind { kFix, kEngine, kMutant };

// One row. A fix or engine row names a change: a variant turns `flag` on by its `name` (or
// `alias`). A mutant row is `base` with `flag` set to `value`: true re-injects a bug, false takes
// a fix out again (MEG-01 is `patched` without the seed fix).
struct DeviationRow {
  DeviationKind kind;
  Deviation flag;
  const char* name;         // the change's name in variants, or the mutant's id
  const char* finding;      // fixes: the finding or known-bug id it fixes ("F3", "HDO-02")
  const char* pr;           // fixes: Megatron's pull request, where one exists ("#6982")
  const char* alias;        // fixes: a second name of the same change ("pr5077"), or ""
  const char* chain_alias;  // the name an earlier release gave the variant up to this change
  const char* base;         // mutants: the variant the bug is re-injected into
  bool value;               // mutants: what `flag` becomes
  const char* doc;          // one line: what the change does, or the bug the mutant re-injects
};

// The rows' constructors, one per kind.
namespace deviation_rows {
inline DeviationRow fix(Deviation flag, const char* name, const char* finding, const char* pr,
                        const char* alias, const char* chain_alias, const char* doc) {
  return {DeviationKind::kFix, flag, name, finding, pr, alias, chain_alias, "", true, doc};
}

inline DeviationRow engine(Deviation flag, const char* name, const char* chain_alias,
                           const char* doc) {
  return {DeviationKind::kEngine, flag, name, "", "", "", chain_alias, "", true, doc};
}

// A mutant that re-injects a bug of its own into `base`.
inline DeviationRow mutant(const char* id, Deviation flag, const char* base, const char* doc) {
  return {DeviationKind::kMutant, flag, id, "", "", "", "", base, true, doc};
}

// A mutant that takes a fix out of the fully patched variant again.
inline DeviationRow fix_removed(const char* id, Deviation fix, const char* doc) {
  return {DeviationKind::kMutant, fix, id, "", "", "", "", "patched", false, doc};
}

}  // namespace deviation_rows

// The fixes, in the order of the docs' change table (the order the findings were made), then the
// engines.
inline std::vector<DeviationRow> change_rows() {
  using D = Deviation;
  using namespace deviation_rows;
  return {
#define SC_FIX_ROW(flag, ...) fix(D::flag, __VA_ARGS__),
#include "shardcheck/fix_rows.inc"
#undef SC_FIX_ROW
      engine(D::kFusedHostAdamw, "fused-host-adamw", "hdo-fused-host-adamw",
             "the host sub-optimizers are `engines::FusedHostAdamW`: one fused, multi-threaded, "
             "vectorised AdamW pass, bit-identical to torch's fused CPU AdamW"),
      engine(D::kPipelined, "pipelined", "hdo-pipelined",
             "the pipelined offload (implies `fused-host-adamw`): the host step runs in chunks "
             "through "
             "pinned staging buffers, the next chunk's D2H copy in flight during each pass"),
  };
}

// The mutants of the shard builder, the optimizers and the layout rules.
inline std::vector<DeviationRow> shard_and_optimizer_mutant_rows() {
  using D = Deviation;
  using namespace deviation_rows;
  return {
      fix_removed("MEG-01", D::kPr6982, "no `detach()` in the fp32 branch"),
      fix_removed("HDO-02", D::kPr4547, "the fp32 host clone left pageable (upstream at d8b71082)"),
      fix_removed(
          "MEG-04", D::kF7,
          "`fully_reshardable` world tensors indexed at padded offsets (upstream at d8b71082)"),
      mutant("MEG-02", D::kStaleIndexMap, "patched", "group index map kept in grad-buffer order"),
      mutant("MEG-03", D::kShardSizeForDoubleDp, "patched",
             "bucket shards sized for twice the DP ranks"),
      mutant("DS-01", D::kDs01TailMomentum, "patched",
             "FusedAdam tail loop squares the first moment"),
      mutant("DS-03", D::kDs03CopyBackSlice, "patched",
             "main params copied back at the absolute buffer index"),
      mutant("DS-04", D::kDs04SharedStep, "patched", "one FusedAdam step counter for all groups"),
      mutant("DS-06", D::kDs06GroupByPosition, "patched",
             "sub-optimizer hyper-parameters taken from the group at the same position"),
      mutant("HDO-05", D::kHdo05Fp32Lookup, "patched",
             "KeyError on loading state of a native fp32 parameter"),
      mutant("HDO-07", D::kHdo07NoFp32Update, "patched",
             "`param_update_in_fp32` dropped: 16-bit host copies and moments"),
      mutant("HDO-08", D::kHdo08FusedOnHost, "patched",
             "the accelerator's FusedAdam used on the host"),
      mutant("TORCH-113-moment", D::kTorch113Moment, "patched",
             "torch's AdamW as PyTorch 1.13 ran it: `fused=True` never read, and the single-tensor "
             "loop's `exp_avg` updated as `m*b1 + (1-b1)*g` instead of 2.11's `exp_avg.lerp_(grad, "
             "1-b1)`"),
      mutant("PT-01", D::kPt01SkipFlush, "patched",
             "multi-tensor launch not flushed after a trailing empty tensor"),
      mutant("FID-bc-double-beta", D::kBcDoubleBetas, "patched",
             "FusedAdam's bias corrections from the double betas, not TE's float betas (finding "
             "P1, the "
             "port's own first formula)"),
      mutant(
          "PT-03", D::kPt03StateStaysWhereLoaded, "patched",
          "(the class of pytorch/pytorch#103256) `load_state_dict` leaves the hybrid optimizer's "
          "state where the state dict was mapped and no longer moves it to its sub-optimizer's "
          "device "
          "(`_move_new_state_to_right_device`)"),
      mutant("RULE-align-32", D::kAlign32, "patched",
             "parameter starts aligned to 32 elements, not 64"),
      mutant("RULE-align-off-by-one", D::kAlignOffByOne, "patched",
             "parameter starts aligned to 63 elements, not 64"),
      mutant("RULE-lcm-product", D::kBucketPadProduct, "patched",
             "bucket ends padded to dp * 128, not lcm(dp, 128)"),
      mutant("RULE-forward-order", D::kForwardOrder, "patched",
             "parameters laid out in list order, not reversed"),
      mutant("RULE-threshold-after-adding", D::kThresholdAfterAdding, "patched",
             "offload threshold tested after adding the tensor"),
      mutant("RULE-pa-no-master-weights", D::kPaNoMasterWeights, "patched",
             "precision-aware without offload: FusedAdam built without master weights"),
  };
}

// The mutants of the offload streams and the checkpoints.
inline std::vector<DeviationRow> stream_and_checkpoint_mutant_rows() {
  using D = Deviation;
  using namespace deviation_rows;
  return {
      mutant("HDO-01", D::kHdo01WrongStream, "patched",
             "the H2D copy-back's event recorded on the D2H stream, not the H2D one"),
      mutant("STREAM-no-d2h-wait", D::kNoD2hWait, "patched",
             "the D2H stream no longer waits for the current stream before the grad copies"),
      mutant(
          "PT-04", D::kPt04GroupOrder, "patched",
          "the distributed-checkpoint loader reads the saved per-param list group by group, not in "
          "the buffer order it was saved in"),
      mutant("DS-05", D::kDs05Fp32Stride, "patched",
             "(analogue) main params copied into a 16-bit param buffer at fp32-sized offsets"),
      mutant("DS-07", D::kDs07DpZeroPaddedOffsets, "patched",
             "the `dp_zero` loader steps through the packed world tensors by each bucket's padded "
             "size"),
      mutant(
          "MEG-06", D::kMeg06DropLrMult, "patched",
          "`lr_mult` dropped from the identifier keys that `load_state_dict` matches saved param "
          "groups by"),
      mutant("MEG-07", D::kMeg07NonTensorState, "patched",
             "(before PR #3537) `_get/_set_main_param_and_optimizer_states` take the non-tensor "
             "entries "
             "of a param's state (`found_inf: bool`) too and apply tensor operations to them"),
      mutant(
          "SHAPE-fused-first-dim", D::kFusedFirstDimOnly, "patched",
          "FusedAdam's kernel takes a tensor's first dimension for its element count (`size(0)` "
          "for "
          "`numel()`): only the first row of a multi-dimensional parameter is stepped, which the "
          "distributed optimizer's flat shards never show"),
  };
}

// The mutants of the step flow, the training loop and our engines.
inline std::vector<DeviationRow> step_flow_and_engine_mutant_rows() {
  using D = Deviation;
  using namespace deviation_rows;
  return {
      mutant("SCALER-hysteresis-every-finite-step", D::kScalerHysteresisEveryFiniteStep, "patched",
             "the dynamic loss scaler restores its hysteresis count after every step with finite "
             "grads "
             "(DeepSpeed's `consecutive_hysteresis`, not Megatron's rule)"),
      mutant("SCALER-no-min-scale", D::kScalerNoMinScale, "patched",
             "the dynamic loss scaler's backoff is not held at the minimum scale"),
      mutant("SCALER-growth-tracker-kept", D::kScalerGrowthTrackerKept, "patched",
             "a step with inf/NaN does not reset the dynamic loss scaler's growth tracker"),
      mutant("MP-found-inf-not-reduced", D::kFoundInfNotReduced, "patched",
             "the found-inf flag is not MAX-reduced over the grad-stats group: a rank whose own "
             "shards "
             "are finite steps while the others skip"),
      mutant("MP-step-despite-inf", D::kStepDespiteInf, "patched",
             "the step goes on after inf/NaN was found"),
      mutant("CLIP-norm-not-reduced", D::kClipNormNotReduced, "patched",
             "the squared grad norm is not SUM-reduced over the grad-stats group: each rank clips "
             "by the "
             "norm of its own shards"),
      mutant(
          "CLIP-always-scaled", D::kClipAlwaysScaled, "patched",
          "the grads are multiplied by the clip coefficient even when it is 1 or more (scaled up)"),
      mutant("CLIP-pa-reads-grad", D::kClipPaReadsGrad, "patched",
             "precision-aware, the norm and the clipping read `.grad` (None there) instead of "
             "`.decoupled_grad`"),
      mutant("ZEROS-counted-before-clipping", D::kZerosBeforeClipping, "patched",
             "the zeros of the grads are counted before the clipping, which can turn the smallest "
             "grads "
             "into zeros"),
      mutant("CLIP-before-unscale", D::kClipBeforeUnscale, "patched",
             "the norm is taken and the grads clipped before the loss scale is taken out"),
      mutant(
          "TRAIN-seed-fix-detaches-param", D::kDetachModelParam, "patched",
          "(ours) a wrong fix of the seed bug: the fp32 branch detaches the model parameter itself "
          "in "
          "place (`model_param.detach_()`) before slicing its shard; construction, leafness, "
          "aliasing "
          "and every step stay right, and the parameter no longer receives gradients in training"),
      mutant("TRAIN-zero-skips-expert-buffers", D::kZeroGradBufferSkipsExpert, "patched",
             "(ours) DDP's `zero_grad_buffer` zeroes `self.buffers` only, not "
             "`self.expert_parallel_buffers`: expert main grads accumulate across iterations"),
      mutant("PIPE-no-staging-wait", D::kPipeNoStagingWait, "patched+pipelined",
             "(ours) the host writes a chunk into a 16-bit staging buffer "
             "without waiting for the H2D copy of the chunk that used it before"),
      mutant("PIPE-no-chunk-wait", D::kPipeNoChunkWait, "patched+pipelined",
             "(ours) the host steps a chunk without waiting for its grad's "
             "D2H "
             "copy"),
      mutant("PIPE-first-dim", D::kPipeFirstDimOnly, "patched+pipelined",
             "(ours) the pipelined offload cuts a tensor into chunks over its "
             "first dimension's length, not its element count"),
      mutant("ENG-strided-fast-path", D::kEngStridedFastPath, "patched+fused-host-adamw",
             "(ours) the fused host AdamW takes its one-pass path for "
             "strided views too, reading them as if contiguous"),
  };
}

// Every row: fixes in the order the findings were made, then the engines, then the mutants.
inline const std::vector<DeviationRow>& deviation_table() {
  static const std::vector<DeviationRow> kRows = [] {
    std::vector<DeviationRow> rows = change_rows();
    for (auto part : {shard_and_optimizer_mutant_rows, stream_and_checkpoint_mutant_rows,
                      step_flow_and_engine_mutant_rows}) {
      const std::vector<DeviationRow> more = part();
      rows.insert(rows.end(), more.begin(), more.end());
    }
    return rows;
  }();
  return kRows;
}

// The fixes that make the fully patched variant, joined with '+' in table order.
inline std::string patched_changes() {
  std::string out;
  for (const DeviationRow& r : deviation_table()) {
    if (r.kind != DeviationKind::kFix) continue;
    out += (out.empty() ? "" : "+") + std::string(r.name);
  }
  return out;
}

}  // namespace sc::sut
