#include "sim/port/behaviour.h"

#include <string>
#include <utility>

namespace sc::sut {

namespace {

// `base` renamed, with one flag set to `value`.
Behaviour with_flag(Behaviour base, const char* name, bool Behaviour::*flag, bool value = true) {
  base.name = name;
  base.*flag = value;
  return base;
}

// One named change to upstream: a fix (one per finding, or a Megatron pull request) or one of
// our offload engines.
struct Change {
  const char* name;
  void (*apply)(Behaviour&, bool on);
};

// Every change, fixes first in the order the findings were made. F7 and pr5077 are one fix:
// Megatron merged the fix of F7 as PR #5077.
const std::vector<Change>& changes() {
  static const std::vector<Change> kChanges = {
      {"pr6982", [](Behaviour& b, bool on) { b.detach_fp32_shard = on; }},
      {"F1", [](Behaviour& b, bool on) { b.fix_hdo_accelerator_decoupled_grad = on; }},
      {"F2", [](Behaviour& b, bool on) { b.fix_hdo_restore_fused_step = on; }},
      {"F3", [](Behaviour& b, bool on) { b.fix_hdo_reload_refreshes_copies = on; }},
      {"F4", [](Behaviour& b, bool on) { b.fix_hdo_master_alias_after_load = on; }},
      {"F5", [](Behaviour& b, bool on) { b.fix_distopt_load_skips_step = on; }},
      {"F6", [](Behaviour& b, bool on) { b.fix_hdo_accelerator_waits_d2h = on; }},
      {"pr4547", [](Behaviour& b, bool on) { b.fix_hdo_pin_fp32_copies = on; }},
      {"F7", [](Behaviour& b, bool on) { b.fix_distopt_reshard_padding = on; }},
      {"pr5077", [](Behaviour& b, bool on) { b.fix_distopt_reshard_padding = on; }},
      {"F8", [](Behaviour& b, bool on) { b.fix_distopt_dp_zero_syncs_hdo = on; }},
      {"F9", [](Behaviour& b, bool on) { b.fix_distopt_gathered_remainders = on; }},
      {"F10", [](Behaviour& b, bool on) { b.fix_hdo_state_device_by_identity = on; }},
      {"F11", [](Behaviour& b, bool on) { b.fix_hdo_load_empty_state = on; }},
      {"F12", [](Behaviour& b, bool on) { b.fix_clip_fp16_decoupled_grads = on; }},
      // Not fixes: our faster offload engines (sim/engines/). Chunks of 4096 elements: the
      // generated tensors (up to 70,000 elements) split into several, and the two staging
      // buffers are reused within a step.
      {"fused-host-adamw", [](Behaviour& b, bool on) { b.fused_host_adamw = on; }},
      {"pipelined",
       [](Behaviour& b, bool on) {
         b.fused_host_adamw = on;
         b.pipeline_chunk = on ? 4096 : 0;
       }},
  };
  return kChanges;
}

// The fixes that make the fully patched variant (every change but the engines and the alias).
constexpr const char* kPatched = "pr6982+F1+F2+F3+F4+F5+F6+pr4547+F7+F8+F9+F10+F11+F12";

// The names of earlier releases, when each variant was the one before plus one fix: aliases.
const std::vector<std::pair<const char*, const char*>>& aliases() {
  static const std::vector<std::pair<const char*, const char*>> kAliases = {
      {"patched", kPatched},
      {"hdo-accel-grad", "pr6982+F1"},
      {"hdo-fused-step", "pr6982+F1+F2"},
      {"hdo-reload", "pr6982+F1+F2+F3"},
      {"hdo-load-alias", "pr6982+F1+F2+F3+F4"},
      {"distopt-load-step", "pr6982+F1+F2+F3+F4+F5"},
      {"hdo-grad-stream", "pr6982+F1+F2+F3+F4+F5+F6"},
      {"hdo-pin-fp32", "pr6982+F1+F2+F3+F4+F5+F6+pr4547"},
      {"distopt-reshard-padding", "pr6982+F1+F2+F3+F4+F5+F6+pr4547+F7"},
      {"distopt-dp-zero-sync", "pr6982+F1+F2+F3+F4+F5+F6+pr4547+F7+F8"},
      {"distopt-gathered-remainders", "pr6982+F1+F2+F3+F4+F5+F6+pr4547+F7+F8+F9"},
      {"hdo-fused-host-adamw", "patched+fused-host-adamw"},
      {"hdo-pipelined", "patched+pipelined"},
  };
  return kAliases;
}

// Applies (`on`) or takes out the change, alias or `upstream` called `token` in `b`; false for
// an unknown name.
bool apply_token(std::string_view token, Behaviour& b, bool on, int depth = 0) {
  if (token == "upstream") return on;
  for (const Change& change : changes()) {
    if (token == change.name) {
      change.apply(b, on);
      return true;
    }
  }
  for (const auto& [alias, expansion] : aliases()) {
    if (token != alias || depth > 2) continue;
    std::string_view rest = expansion;
    while (!rest.empty()) {
      const size_t plus = rest.find('+');
      if (!apply_token(rest.substr(0, plus), b, on, depth + 1)) return false;
      rest = plus == std::string_view::npos ? std::string_view() : rest.substr(plus + 1);
    }
    return true;
  }
  return false;
}

// The longest change, alias or `upstream` that `rest` starts with and that ends there or at a
// '+' or '-' (names hold dashes: "fused-host-adamw", "hdo-accel-grad"); empty when none does.
std::string_view next_name(std::string_view rest) {
  std::string_view best;
  auto consider = [&](std::string_view name) {
    if (rest.substr(0, name.size()) != name || name.size() <= best.size()) return;
    if (rest.size() == name.size() || rest[name.size()] == '+' || rest[name.size()] == '-') {
      best = name;
    }
  };
  consider("upstream");
  for (const Change& change : changes()) consider(change.name);
  for (const auto& alias : aliases()) consider(alias.first);
  return best;
}

// `upstream` with the changes and aliases of `name` added after '+' and taken out after '-'
// ("pr6982+F1", "patched-F3"), or nullopt when a part is unknown or empty.
std::optional<Behaviour> composed(std::string_view name) {
  Behaviour b{std::string(name)};
  bool on = true;
  std::string_view rest = name;
  while (true) {
    const std::string_view token = next_name(rest);
    if (token.empty() || !apply_token(token, b, on)) return std::nullopt;
    if (token.size() == rest.size()) return b;
    on = rest[token.size()] == '+';
    rest = rest.substr(token.size() + 1);
  }
}

}  // namespace

const std::vector<Behaviour>& all_behaviours() {
  static const std::vector<Behaviour> kAll = [] {
    // upstream, the seed fix, each later fix alone on it, the fully patched variant, then the
    // offload engines on the fully patched variant.
    std::vector<std::string> names{"upstream", "pr6982"};
    for (const Change& change : changes()) {
      const std::string name = change.name;
      if (name == "pr6982" || name == "pr5077" || name == "fused-host-adamw" ||
          name == "pipelined") {
        continue;
      }
      names.push_back("pr6982+" + name);
    }
    for (const char* name : {"patched", "patched+fused-host-adamw", "patched+pipelined"}) {
      names.push_back(name);
    }
    std::vector<Behaviour> out;
    for (const std::string& name : names) out.push_back(*composed(name));
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
    add("TORCH-113-moment", &Behaviour::mutant_torch113_moment);
    add("PT-01", &Behaviour::mutant_pt01_skip_flush);
    add("FID-bc-double-beta", &Behaviour::mutant_bc_double_betas);
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
    add("SHAPE-fused-first-dim", &Behaviour::mutant_fused_first_dim_only);
    add("SCALER-hysteresis-every-finite-step",
        &Behaviour::mutant_scaler_hysteresis_every_finite_step);
    add("SCALER-no-min-scale", &Behaviour::mutant_scaler_no_min_scale);
    add("SCALER-growth-tracker-kept", &Behaviour::mutant_scaler_growth_tracker_kept);
    add("MP-found-inf-not-reduced", &Behaviour::mutant_found_inf_not_reduced);
    add("MP-step-despite-inf", &Behaviour::mutant_step_despite_inf);
    add("CLIP-norm-not-reduced", &Behaviour::mutant_clip_norm_not_reduced);
    add("CLIP-always-scaled", &Behaviour::mutant_clip_always_scaled);
    add("CLIP-pa-reads-grad", &Behaviour::mutant_clip_pa_reads_grad);
    add("ZEROS-counted-before-clipping", &Behaviour::mutant_zeros_before_clipping);
    add("CLIP-before-unscale", &Behaviour::mutant_clip_before_unscale);
    add("TRAIN-seed-fix-detaches-param", &Behaviour::mutant_detach_model_param);
    add("TRAIN-zero-skips-expert-buffers", &Behaviour::mutant_zero_grad_buffer_skips_expert);
    // Mutants of the pipelined offload, on its variant.
    Behaviour pipelined = *composed("patched+pipelined");
    pipelined.is_mutant = true;
    out.push_back(with_flag(pipelined, "PIPE-no-staging-wait",
                            &Behaviour::mutant_pipe_no_staging_wait));
    out.push_back(with_flag(pipelined, "PIPE-no-chunk-wait", &Behaviour::mutant_pipe_no_chunk_wait));
    out.push_back(with_flag(pipelined, "PIPE-first-dim", &Behaviour::mutant_pipe_first_dim_only));
    // A mutant of the fused host AdamW, on its variant.
    Behaviour fused_host = *composed("patched+fused-host-adamw");
    fused_host.is_mutant = true;
    out.push_back(with_flag(fused_host, "ENG-strided-fast-path",
                            &Behaviour::mutant_eng_strided_fast_path));
    return out;
  }();
  return kAll;
}

std::optional<Behaviour> behaviour_by_name(std::string_view name) {
  for (const Behaviour& b : all_mutants()) {
    if (b.name == name) return b;
  }
  return composed(name);
}

Behaviour upstream() { return all_behaviours().front(); }

Behaviour fully_patched() { return *composed("patched"); }

}  // namespace sc::sut
