// Behaviour sets of the port: upstream Megatron-Core (d8b71082) and named deviations from it.
//
// Every deviation from upstream is one named flag here; the port consults only these flags.
// `upstream` has every flag at its upstream value. A variant is upstream plus a set of named
// changes joined with '+' (and taken out with '-'): the fixes `pr6982`, `F1` ... `F9` (one per
// finding of FINDINGS.md; `pr5077` is Megatron's merge of F7's fix), `pr4547`, and our offload
// engines `fused-host-adamw` and `pipelined`; `patched` is every fix. So `pr6982+F1`,
// `patched-F3`, `patched+pipelined`. A mutant is the fully patched variant with one known bug.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sc::sut {

// One variant of the port.
struct Behaviour {
  std::string name;
  // PR #6982: `_build_model_and_main_param_groups` detaches fp32 model params before slicing.
  bool detach_fp32_shard = false;
  // Mutant MEG-02: keep the group index map in grad-buffer order instead of rebuilding it in
  // installed order ([fp32..., 16-bit...]) after `_build_model_and_main_param_groups`.
  bool mutant_stale_index_map = false;
  // Mutant MEG-03: size each rank's shard of a bucket for twice the DP ranks that the rank loop
  // walks, so trailing elements of every bucket belong to no rank.
  bool mutant_shard_size_for_double_dp = false;
  // Finding F1 (FINDINGS.md): HybridDeviceOptimizer also hands `decoupled_grad` to the
  // accelerator sub-optimizer as `.grad` for parameters it steps in place, so precision-aware
  // runs update fp32 shards that stay on the accelerator.
  bool fix_hdo_accelerator_decoupled_grad = false;
  // Finding F2 (FINDINGS.md): the hybrid optimizer keeps the accelerator FusedAdam's group step
  // count in each state entry and restores it when load_state_dict rebuilds the sub-optimizers.
  bool fix_hdo_restore_fused_step = false;
  // Finding F3 (FINDINGS.md): reload_model_params with a hybrid optimizer also refreshes the
  // host copies of fp32 parameters and, without precision-aware, the fp32 main params.
  bool fix_hdo_reload_refreshes_copies = false;
  // Finding F4 (FINDINGS.md): after load_state_dict, hdo.state's master_param is the loaded
  // tensor, not the fp32 or host copy the sub-optimizer steps; the fix re-aliases it.
  bool fix_hdo_master_alias_after_load = false;
  // Finding F5 (FINDINGS.md): with a torch AdamW state (no Transformer Engine, or the hybrid
  // optimizer's host AdamW without precision-aware) a distributed checkpoint cannot be loaded:
  // state_dict() of a fresh optimizer asserts one step among no state, and the default
  // "fully_sharded_model_space" loader skips `step`, then looks every live state tensor up,
  // `step` included (KeyError); and a hybrid optimizer without a host AdamW saves no step, so its
  // FusedAdam restarts at 1. The fix writes no step for a fresh optimizer, leaves `step` to the
  // param groups and saves the FusedAdam's step when no host AdamW has one.
  bool fix_distopt_load_skips_step = false;
  // Finding F6 (FINDINGS.md): with overlap on, the accelerator sub-optimizer reads fp32 grads
  // that were cast on the D2H stream without waiting for it; the fix makes the current stream
  // wait for the D2H stream first.
  bool fix_hdo_accelerator_waits_d2h = false;
  // Megatron PR #4547 (merged after d8b71082; HDO-02 in the known bugs): the fp32 clone of an
  // offloaded 16-bit parameter is pinned again when pin_cpu_params, so its non-blocking copies
  // stay asynchronous.
  bool fix_hdo_pin_fp32_copies = false;
  // Megatron PR #5077 (merged after d8b71082; MEG-04 in the known bugs, finding F7):
  // sharded_param_state_fully_reshardable slices the packed world tensors (each bucket's end
  // padding stripped) at param_index_map's buffer offsets, which still count that padding; the
  // fix subtracts the padding of the earlier buckets.
  bool fix_distopt_reshard_padding = false;
  // Finding F8 (FINDINGS.md): load_parameter_state_from_dp_zero (the "dp_zero_gather_scatter"
  // format and the torch-format checkpoints' load_parameter_state) puts the loaded tensors into
  // hdo.state but never syncs them to the sub-optimizers, which keep stepping their old state;
  // the fix syncs after the load, as the fully_reshardable and model-space loaders do.
  bool fix_distopt_dp_zero_syncs_hdo = false;
  // Finding F10 (FINDINGS.md): without Transformer Engine both hybrid sub-optimizer classes are
  // torch.optim.AdamW, so after load_state_dict `isinstance(optimizer, cpu_optimizer_cls)` sends
  // the accelerator sub-optimizer's state to the host too. The fix tells the sub-optimizers
  // apart by identity: the host ones are `cpu_optimizers`.
  bool fix_hdo_state_device_by_identity = false;
  // Finding F11 (FINDINGS.md): with param_update_in_fp32 the post-load hook rebuilds hdo.state as
  // a plain dict, so loading a state dict saved before the first step (no state entries) raises
  // KeyError in `_sync_hdo_state_to_sub_optimizers`. The fix leaves a parameter without state
  // without state.
  bool fix_hdo_load_empty_state = false;
  // Finding F12 (FINDINGS.md): `clip_grad_by_total_norm_fp32` asserts that a decoupled grad is
  // fp32 or bf16, so a precision-aware step with fp16 grad buffers raises a bare AssertionError
  // whenever clipping is on. The fix accepts fp16 decoupled grads, as the norm already does.
  bool fix_clip_fp16_decoupled_grads = false;
  // Finding F9 (FINDINGS.md): with precision-aware FusedAdam keeping bf16 remainders,
  // get_parameter_state_dp_zero copies the int16 remainders into the fp32 world tensors as if
  // they were the master, and loading hands that fp32 tensor to set_scaled_state, which asserts
  // int16. The fix gathers the joined fp32 master and splits it again on load.
  bool fix_distopt_gathered_remainders = false;
  // Not a fix: an offload engine of ours (sim/engines/). The host sub-optimizers are
  // engines::FusedHostAdamW (one multi-threaded, vectorised pass per step, bit-identical to
  // torch::optim::AdamW) instead of torch::optim::AdamW.
  bool fused_host_adamw = false;
  // Not a fix: the pipelined offload (on top of fused_host_adamw) when > 0. The host part of a
  // step runs as a pipeline over chunks of at most this many elements of each offloaded tensor:
  // the grad chunk copied D2H into one of two pinned staging buffers (in the grad's own dtype),
  // the fused AdamW pass over the chunk while the next chunk's copy runs, and the updated chunk
  // copied H2D (cast on the host into a pinned staging buffer first when the accelerator's
  // parameter is 16-bit, so half the bytes cross the link; the cast rounds as the device's
  // would). No full-size host grad buffers are kept.
  int64_t pipeline_chunk = 0;
  // Mutant PIPE-no-staging-wait: the host writes a chunk's 16-bit staging buffer without waiting
  // for the H2D copy of the chunk that used it before.
  bool mutant_pipe_no_staging_wait = false;
  // Mutant PIPE-no-chunk-wait: the host steps a chunk without waiting for its grad's D2H copy.
  bool mutant_pipe_no_chunk_wait = false;
  // Mutant DS-01: FusedAdam's tail loop multiplies the first moment by itself times beta1.
  bool mutant_ds01_tail_momentum = false;
  // Mutant DS-03: main params are copied back into the bucket at their absolute buffer index
  // (`gbuf_world`) instead of the index inside the bucket, a wrong slice past the first bucket.
  bool mutant_ds03_copy_back_slice = false;
  // Mutant DS-04: FusedAdam keeps one step count for all groups, advanced once per group.
  bool mutant_ds04_shared_step = false;
  // Mutant DS-06: hyper-parameters synced into sub-optimizer group k come from HDO group k.
  bool mutant_ds06_group_by_position = false;
  // Mutant HDO-05: `_update_fp32_params_by_new_state` looks up every state entry in the fp32
  // map, so a native fp32 parameter raises KeyError on load_state_dict (before PR #6124).
  bool mutant_hdo05_fp32_lookup = false;
  // Mutant HDO-07: the factory's param_update_in_fp32 is dropped: host copies of 16-bit shards
  // stay 16-bit and AdamW sizes their moments like them.
  bool mutant_hdo07_no_fp32_update = false;
  // Mutant TORCH-113-moment: torch's AdamW steps as on PyTorch 1.13: `fused` is never read and
  // the single-tensor loop updates exp_avg as m*b1 + (1-b1)*g instead of 2.11's
  // `exp_avg.lerp_(grad, 1 - beta1)`.
  bool mutant_torch113_moment = false;
  // Mutant HDO-08: the host sub-optimizers are the accelerator's FusedAdam class.
  bool mutant_hdo08_fused_on_host = false;
  // Mutant FID-bc-double-beta: FusedAdam's bias corrections computed from the double betas, not
  // from the float betas Transformer Engine's host code receives (the port's own first version).
  bool mutant_bc_double_betas = false;
  // Mutant PT-01: the multi-tensor FusedAdam skips its final flush when the last tensor of a
  // group is empty, so the tensors batched before it are never updated.
  bool mutant_pt01_skip_flush = false;
  // Mutant PT-03 (pytorch/pytorch#103256, the class of `step` left on the device the state dict
  // was mapped to): load_state_dict leaves the hybrid optimizer's state where the state dict was
  // mapped (no cast to the device of the parameter it is keyed by) and the post-load hook no
  // longer moves it to the device of its sub-optimizer (`_move_new_state_to_right_device`).
  bool mutant_pt03_state_stays_where_loaded = false;
  // Rule mutants (our own, one per layout or offload rule of the model):
  // parameter starts aligned to 32 elements instead of 64;
  bool mutant_align_32 = false;
  // parameter starts aligned to 63 elements instead of 64 (off by one);
  bool mutant_align_off_by_one = false;
  // bucket ends padded to dp * 128 instead of lcm(dp, 128);
  bool mutant_bucket_pad_product = false;
  // parameters laid out in list order instead of reversed;
  bool mutant_forward_order = false;
  // the offload threshold tested after adding the tensor;
  bool mutant_threshold_after_adding = false;
  // precision-aware without offload, the FusedAdam built without master weights (a 16-bit
  // parameter stepped in its own dtype, its low bits lost every step).
  bool mutant_pa_no_master_weights = false;
  // Mutant HDO-01: the copy-back event is recorded on the D2H stream, not the H2D one.
  bool mutant_hdo01_wrong_stream = false;
  // Stream mutant: the D2H stream does not wait for the current stream before the grad copies.
  bool mutant_no_d2h_wait = false;
  // Mutant PT-04: the distributed-checkpoint loader ("fully_sharded_model_space") reads the
  // saved per-param list as if each optimizer group's params were contiguous in it (group by
  // group), while it was saved in buffer order.
  bool mutant_pt04_group_order = false;
  // Mutant DS-05 (analogue): main params are copied into a 16-bit param buffer at fp32-sized
  // offsets (twice the element index), the width error of half-precision CPU Adam.
  bool mutant_ds05_fp32_stride = false;
  // Mutant DS-07: load_parameter_state_from_dp_zero advances through the packed world tensors by
  // each bucket's padded size, as if the end padding had been saved.
  bool mutant_ds07_dp_zero_padded_offsets = false;
  // Mutant MEG-06: `lr_mult` dropped from the identifier keys that load_state_dict matches saved
  // param groups by, so groups that differ only in it collide and one takes the other's
  // hyper-parameters.
  bool mutant_meg06_drop_lr_mult = false;
  // Mutant MEG-07 (before PR #3537): `_get_main_param_and_optimizer_states` and
  // `_set_main_param_and_optimizer_states` take every entry of a param's optimizer state, the
  // non-tensor ones (e.g. `found_inf: bool`) too, and apply tensor operations to them.
  bool mutant_meg07_non_tensor_state = false;
  // Mutant SHAPE-fused-first-dim: FusedAdam's kernel counts a tensor's elements as its first
  // dimension (`size(0)` for `numel()`), so only the first row of a multi-dimensional parameter
  // is stepped; the distributed optimizer's flat shards never show it.
  bool mutant_fused_first_dim_only = false;
  // Mutant ENG-strided-fast-path: the fused host AdamW takes its one-pass path for strided views
  // too, reading `numel()` elements from the view's first element in memory order.
  bool mutant_eng_strided_fast_path = false;
  // Mutant PIPE-first-dim: the pipelined offload cuts each tensor into chunks over its first
  // dimension's length instead of its element count.
  bool mutant_pipe_first_dim_only = false;
  // Scaler mutants (our own, one per rule of the dynamic loss scaler): the hysteresis count
  // restored after every step with finite grads (DeepSpeed's `consecutive_hysteresis`, not
  // Megatron's rule);
  bool mutant_scaler_hysteresis_every_finite_step = false;
  // the backoff not held at the minimum scale;
  bool mutant_scaler_no_min_scale = false;
  // the growth tracker not reset by a step with non-finite grads.
  bool mutant_scaler_growth_tracker_kept = false;
  // Mutant MP-found-inf-not-reduced: the found-inf flag is not MAX-reduced over the grad-stats
  // group, so a rank whose own shards are finite steps while the others skip.
  bool mutant_found_inf_not_reduced = false;
  // Mutant MP-step-despite-inf: the step goes on after inf/NaN was found (the scaler still
  // backs off).
  bool mutant_step_despite_inf = false;
  // Gradient-statistics mutants (our own): the squared norm not SUM-reduced over the grad-stats
  // group (each rank clips by its own shards' norm);
  bool mutant_clip_norm_not_reduced = false;
  // the grads multiplied by the coefficient even when it is 1 or more (scaled up);
  bool mutant_clip_always_scaled = false;
  // precision-aware, the norm and the clipping read `.grad` instead of `.decoupled_grad`;
  bool mutant_clip_pa_reads_grad = false;
  // the zeros counted before the clipping, which can turn tiny grads into zeros;
  bool mutant_zeros_before_clipping = false;
  // the norm taken and the grads clipped before the loss scale is taken out.
  bool mutant_clip_before_unscale = false;
  // Mutants of the training loop (Target::training_loop): TRAIN-seed-fix-detaches-param, a wrong
  // fix of the seed bug that detaches the fp32 model parameter itself in place before slicing
  // its shard (construction, leafness, aliasing and steps stay right; the parameter no longer
  // receives gradients);
  bool mutant_detach_model_param = false;
  // TRAIN-zero-skips-expert-buffers: DDP's zero_grad_buffer zeroes `self.buffers` only, so the
  // expert buffers' main grads accumulate across iterations.
  bool mutant_zero_grad_buffer_skips_expert = false;
  // True for re-injected known bugs, which exist only to be killed by the suite.
  bool is_mutant = false;
};

// The variants `--variant=all` runs: upstream, pr6982, each later fix alone on pr6982
// (pr6982+F1, ..., pr6982+pr4547), patched, then patched with each offload engine.
const std::vector<Behaviour>& all_behaviours();
// Every mutant: the fully patched variant with one known bug re-injected (the PIPE mutants:
// patched+pipelined with one wait of its schedule dropped).
const std::vector<Behaviour>& all_mutants();
// The mutant called `name`, or the variant `name` composes ("pr6982+F1", "patched-F3"; the
// names of earlier releases, such as "hdo-accel-grad", are aliases of their sets), or nullopt
// when a part of it is unknown.
std::optional<Behaviour> behaviour_by_name(std::string_view name);
// Megatron-Core at d8b71082 as it is.
Behaviour upstream();
// The fully patched variant: every proposed fix applied.
Behaviour fully_patched();

}  // namespace sc::sut
