#include "sim/sut/behaviour.h"

#include <algorithm>

namespace sc::sut {

namespace {

// `base` renamed, with one flag set to `value`.
Behaviour with_flag(Behaviour base, const char* name, bool Behaviour::*flag, bool value = true) {
  base.name = name;
  base.*flag = value;
  return base;
}

}  // namespace

const std::vector<Behaviour>& all_behaviours() {
  static const std::vector<Behaviour> kAll = [] {
    // Each variant is the previous one plus one fix, in the order the findings were made.
    std::vector<Behaviour> out{Behaviour{"upstream"}};
    auto then = [&](const char* name, bool Behaviour::*fix) {
      out.push_back(with_flag(out.back(), name, fix));
    };
    then("pr6982", &Behaviour::detach_fp32_shard);
    then("hdo-accel-grad", &Behaviour::fix_hdo_accelerator_decoupled_grad);
    then("hdo-fused-step", &Behaviour::fix_hdo_restore_fused_step);
    then("hdo-reload", &Behaviour::fix_hdo_reload_refreshes_copies);
    then("hdo-load-alias", &Behaviour::fix_hdo_master_alias_after_load);
    then("distopt-load-step", &Behaviour::fix_distopt_load_skips_step);
    then("hdo-grad-stream", &Behaviour::fix_hdo_accelerator_waits_d2h);
    then("hdo-pin-fp32", &Behaviour::fix_hdo_pin_fp32_copies);
    then("distopt-reshard-padding", &Behaviour::fix_distopt_reshard_padding);
    then("distopt-dp-zero-sync", &Behaviour::fix_distopt_dp_zero_syncs_hdo);
    then("distopt-gathered-remainders", &Behaviour::fix_distopt_gathered_remainders);
    // The faster offload path, on the fully patched variant: not a fix, so fully_patched()
    // stays the end of the chain above.
    then("hdo-fused-host-adamw", &Behaviour::fused_host_adamw);
    // The pipelined offload on top of it. Chunks of 4096 elements: the generated tensors (up to
    // 70,000 elements) split into several, and the two staging buffers are reused within a step.
    out.push_back(out.back());
    out.back().name = "hdo-pipelined";
    out.back().pipeline_chunk = 4096;
    return out;
  }();
  return kAll;
}

const std::vector<Behaviour>& all_mutants() {
  static const std::vector<Behaviour> kAll = [] {
    std::vector<Behaviour> out;
    Behaviour base = fully_patched();
    base.is_mutant = true;
    auto add = [&](const char* name, bool Behaviour::*flag) {
      out.push_back(with_flag(base, name, flag));
    };
    // The seed defect itself: the fix taken out again.
    out.push_back(with_flag(base, "MEG-01", &Behaviour::detach_fp32_shard, false));
    // HDO-02: pinned host memory lost again (upstream at d8b71082).
    out.push_back(with_flag(base, "HDO-02", &Behaviour::fix_hdo_pin_fp32_copies, false));
    // MEG-04: packed world tensors indexed at padded offsets again (upstream at d8b71082).
    out.push_back(with_flag(base, "MEG-04", &Behaviour::fix_distopt_reshard_padding, false));
    add("MEG-02", &Behaviour::mutant_stale_index_map);
    add("MEG-03", &Behaviour::mutant_shard_size_for_double_dp);
    add("DS-01", &Behaviour::mutant_ds01_tail_momentum);
    add("DS-03", &Behaviour::mutant_ds03_copy_back_slice);
    add("DS-04", &Behaviour::mutant_ds04_shared_step);
    add("DS-06", &Behaviour::mutant_ds06_group_by_position);
    add("HDO-05", &Behaviour::mutant_hdo05_fp32_lookup);
    add("HDO-07", &Behaviour::mutant_hdo07_no_fp32_update);
    add("HDO-08", &Behaviour::mutant_hdo08_fused_on_host);
    add("PT-01", &Behaviour::mutant_pt01_skip_flush);
    add("PT-03", &Behaviour::mutant_pt03_state_stays_where_loaded);
    add("RULE-align-32", &Behaviour::mutant_align_32);
    add("RULE-align-off-by-one", &Behaviour::mutant_align_off_by_one);
    add("RULE-lcm-product", &Behaviour::mutant_bucket_pad_product);
    add("RULE-forward-order", &Behaviour::mutant_forward_order);
    add("RULE-threshold-after-adding", &Behaviour::mutant_threshold_after_adding);
    add("RULE-pa-no-master-weights", &Behaviour::mutant_pa_no_master_weights);
    add("HDO-01", &Behaviour::mutant_hdo01_wrong_stream);
    add("STREAM-no-d2h-wait", &Behaviour::mutant_no_d2h_wait);
    add("PT-04", &Behaviour::mutant_pt04_group_order);
    add("DS-05", &Behaviour::mutant_ds05_fp32_stride);
    add("DS-07", &Behaviour::mutant_ds07_dp_zero_padded_offsets);
    add("MEG-06", &Behaviour::mutant_meg06_drop_lr_mult);
    add("MEG-07", &Behaviour::mutant_meg07_non_tensor_state);
    // Mutants of the pipelined offload, on its variant.
    Behaviour pipelined = *std::find_if(all_behaviours().begin(), all_behaviours().end(),
                                        [](const Behaviour& b) { return b.name == "hdo-pipelined"; });
    pipelined.is_mutant = true;
    out.push_back(with_flag(pipelined, "PIPE-no-staging-wait",
                            &Behaviour::mutant_pipe_no_staging_wait));
    out.push_back(with_flag(pipelined, "PIPE-no-chunk-wait", &Behaviour::mutant_pipe_no_chunk_wait));
    return out;
  }();
  return kAll;
}

std::optional<Behaviour> behaviour_by_name(std::string_view name) {
  for (const Behaviour& b : all_behaviours()) {
    if (b.name == name) return b;
  }
  for (const Behaviour& b : all_mutants()) {
    if (b.name == name) return b;
  }
  return std::nullopt;
}

Behaviour upstream() { return all_behaviours().front(); }

Behaviour fully_patched() { return *behaviour_by_name("distopt-gathered-remainders"); }

}  // namespace sc::sut
