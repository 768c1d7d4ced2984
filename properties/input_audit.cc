#include "properties/input_audit.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "properties/buffer_groups_props.h"
#include "properties/coverage.h"
#include "properties/gen/case_draws.h"
#include "properties/hybrid_state.h"
#include "properties/overlap_props.h"
#include "properties/step_flow_props.h"
#include "properties/wrapper_props.h"

namespace sc::props {

namespace {

using Predicate = std::function<bool(const CaseInputs&)>;

bool any_param(const CaseInputs& in, const std::function<bool(const model::ParamSpec&)>& f) {
  return std::any_of(in.c.params.begin(), in.c.params.end(), f);
}

bool in_class(const CaseInputs& in, const std::string& cls) {
  const auto hit = coverage_classes(in.c);
  return std::find(hit.begin(), hit.end(), cls) != hit.end();
}

bool any_grad(const CaseInputs& in, std::initializer_list<gen::GradKind> kinds) {
  for (const gen::StepDraw& s : in.schedule.steps) {
    for (gen::GradKind k : s.kinds) {
      if (std::find(kinds.begin(), kinds.end(), k) != kinds.end()) return true;
    }
  }
  return false;
}

bool hyper_changes(const CaseInputs& in) {
  for (size_t k = 1; k < in.schedule.steps.size(); ++k) {
    if (!(in.schedule.steps[k].hyper == in.schedule.steps[0].hyper)) return true;
  }
  return false;
}

// A save of the hybrid optimizer's state before its first step, in the command sequence.
bool saves_before_a_step(const CaseInputs& in) {
  for (const StateCommand& c : in.commands) {
    if (std::holds_alternative<state_cmd::Step>(c)) return false;
    if (std::holds_alternative<state_cmd::SaveState>(c)) return true;
  }
  return false;
}

template <typename Command>
bool has_command(const CaseInputs& in) {
  return std::any_of(in.commands.begin(), in.commands.end(),
                     [](const StateCommand& c) { return std::holds_alternative<Command>(c); });
}

InputDimension drawn(std::string kind, std::string dimension, std::string generator,
                     std::function<CaseInputs()> draw, Predicate present, double min_rate) {
  auto sample = [draw = std::move(draw), present = std::move(present)] { return present(draw()); };
  return {std::move(kind), std::move(dimension), std::move(generator), sample, min_rate, ""};
}

InputDimension not_drawn(std::string kind, std::string dimension, std::string why) {
  return {std::move(kind), std::move(dimension), "", nullptr, 0, std::move(why)};
}

void add_params(std::vector<InputDimension>& out) {
  const auto draw = gen::case_and_schedule;
  const std::string g = "gen::case_and_schedule";
  const std::string k = "per parameter";
  out.push_back(drawn(
      k, "a 16-bit parameter (bf16 or fp16)", g, draw,
      [](const CaseInputs& in) {
        return any_param(in, [](const auto& p) { return model::is_float16(p.dtype); });
      },
      0.5));
  out.push_back(drawn(
      k, "an fp32 parameter in a 16-bit model (mark_keep_in_fp32)", g, draw,
      [](const CaseInputs& in) { return in_class(in, "fp32 parameter inside a 16-bit model"); },
      0.3));
  out.push_back(drawn(
      k, "bf16 and fp16 parameters in one model", g, draw,
      [](const CaseInputs& in) {
        return any_param(in, [](const auto& p) { return p.dtype == model::DType::kBFloat16; }) &&
               any_param(in, [](const auto& p) { return p.dtype == model::DType::kFloat16; });
      },
      0.05));
  out.push_back(drawn(
      k, "a parameter of 2 to 4 dimensions", g, draw,
      [](const CaseInputs& in) {
        return any_param(in, [](const auto& p) { return p.shape.size() >= 2; });
      },
      0.3));
  out.push_back(drawn(
      k, "an expert parameter (its own buffer and expert DP group)", g, draw,
      [](const CaseInputs& in) { return any_param(in, [](const auto& p) { return p.is_expert; }); },
      0.1));
  out.push_back(drawn(
      k, "a shared embedding (a bucket of its own)", g, draw,
      [](const CaseInputs& in) { return in_class(in, "shared embedding"); }, 0.15));
  out.push_back(drawn(
      k, "a parameter across a DP rank boundary", g, draw,
      [](const CaseInputs& in) { return in_class(in, "parameter straddles a rank boundary"); },
      0.4));
  out.push_back({k,
                 "a rank whose parameters are all frozen (requires_grad False): the stub the "
                 "factory builds of Float16OptimizerWithFloat16Params, FP32Optimizer or the "
                 "DistributedOptimizer",
                 "wrapper_lifecycle_call", [] { return (*wrapper_lifecycle_call()).frozen; }, 0.25,
                 ""});
  out.push_back(not_drawn(k, "a frozen parameter beside trainable ones on one rank",
                          "Megatron leaves a frozen parameter out of DDP's buffers and out of "
                          "the param groups, so the optimizer built is the one of the trainable "
                          "parameters alone, which every case draws"));
}

void add_steps(std::vector<InputDimension>& out) {
  const auto draw = gen::case_and_schedule;
  const std::string g = "gen::case_and_schedule";
  const std::string k = "per step";
  out.push_back(drawn(
      k, "several steps", g, draw,
      [](const CaseInputs& in) { return in.schedule.steps.size() >= 2; }, 0.5));
  out.push_back(drawn(
      k, "an all-zero gradient", g, draw,
      [](const CaseInputs& in) { return any_grad(in, {gen::GradKind::kZero}); }, 0.2));
  out.push_back(drawn(
      k, "tiny or large gradients", g, draw,
      [](const CaseInputs& in) {
        return any_grad(in, {gen::GradKind::kTiny, gen::GradKind::kLarge});
      },
      0.3));
  out.push_back({k, "an inf or NaN gradient (the found-inf skip) under Megatron's loss scaler",
                 "draw_found_inf", [] { return !draw_found_inf().injected.empty(); }, 0.3, ""});
  out.push_back(
      drawn(k, "learning rate or weight decay changed between steps", g, draw, hyper_changes, 0.2));
  out.push_back(drawn(
      k, "learning rate and weight decay 0", "gen::zero_lr_case", gen::zero_lr_case,
      [](const CaseInputs& in) { return !in.schedule.steps.empty(); }, 1.0));
  out.push_back({k,
                 "a gradient norm of another type (inf, 1, 3) through get_grad_norm_fp32, a "
                 "public function of clip_grads, called directly",
                 "direct_grad_norm_call",
                 [] { return (*direct_grad_norm_call()).norm_type != 2.0; }, 0.5, ""});
  out.push_back({k, "a rank without grads in a direct get_grad_norm_fp32 call",
                 "direct_grad_norm_call",
                 [] { return has_rank_without_grads(*direct_grad_norm_call()); }, 0.3, ""});
}

void add_groups_and_configuration(std::vector<InputDimension>& out) {
  const auto draw = gen::case_and_schedule;
  const std::string g = "gen::case_and_schedule";
  out.push_back(drawn(
      "per group", "several param groups (weight-decay groups)", g, draw,
      [](const CaseInputs& in) { return in.c.num_groups() >= 2; }, 0.3));
  out.push_back(drawn(
      "per group", "a group empty on a DP rank", g, draw,
      [](const CaseInputs& in) { return in_class(in, "empty group on a checked rank"); }, 0.4));
  const std::string k = "configuration";
  out.push_back(drawn(
      k, "DP odd or prime", g, draw,
      [](const CaseInputs& in) { return in_class(in, "dp odd (> 1)"); }, 0.3));
  out.push_back(drawn(
      k, "an expert DP size other than the dense one", g, draw,
      [](const CaseInputs& in) {
        return in.c.expert_dp != in.c.dp &&
               any_param(in, [](const auto& p) { return p.is_expert; });
      },
      0.05));
  out.push_back(drawn(
      k, "several buckets (bucket_size) and overlap_grad_reduce", g, draw,
      [](const CaseInputs& in) { return in.c.bucket_size.has_value(); }, 0.3));
  out.push_back(drawn(
      k, "pad_buckets_for_high_nccl_busbw", g, draw,
      [](const CaseInputs& in) { return in.c.pad_for_high_nccl_busbw; }, 0.05));
  out.push_back(drawn(
      k, "grad_reduce_in_fp32", g, draw,
      [](const CaseInputs& in) { return in.c.grad_reduce_in_fp32; }, 0.2));
  out.push_back(drawn(
      k, "the precision-aware optimizer", g, draw,
      [](const CaseInputs& in) { return in.c.precision_aware; }, 0.25));
  out.push_back(drawn(
      k, "store_param_remainders off", g, draw,
      [](const CaseInputs& in) { return !in.c.store_param_remainders; }, 0.1));
  out.push_back(drawn(
      k, "optimizer_cpu_offload, fraction strictly between 0 and 1", g, draw,
      [](const CaseInputs& in) {
        return in.c.cpu_offload && in.c.offload_fraction > 0 && in.c.offload_fraction < 1;
      },
      0.1));
  out.push_back(drawn(
      k, "overlap_cpu_optimizer_d2h_h2d off", g, draw,
      [](const CaseInputs& in) { return in.c.cpu_offload && !in.c.overlap_cpu_optimizer_d2h_h2d; },
      0.1));
  out.push_back(drawn(
      k, "without Transformer Engine (torch's AdamW)", g, draw,
      [](const CaseInputs& in) { return !in.c.transformer_engine; }, 0.15));
  out.push_back(drawn(
      k, "two model chunks (virtual pipeline stages)", g, draw,
      [](const CaseInputs& in) { return any_param(in, [](const auto& p) { return p.chunk > 0; }); },
      0.1));
  out.push_back(not_drawn(k,
                          "several distributed-optimizer instances "
                          "(num_distributed_optimizer_instances > 1)",
                          "every world has one instance; it hides G12, whose race also needs "
                          "compute on a non-default CUDA stream"));
}

// DDP's own options beyond the case's: where the buffers' process groups come from (those a
// direct caller leaves to parallel_state; DDP always hands its own), and the param all-gather
// its forward pre-hooks dispatch.
void add_ddp_options(std::vector<InputDimension>& out) {
  out.push_back(drawn(
      "configuration",
      "DDP's buffers built by a direct caller without a pg_collection, their groups from "
      "parallel_state (Megatron's own module, initialized with the case's groups)",
      "direct_caller_case", direct_caller_case,
      [](const CaseInputs& in) { return in.c.buffers_from_parallel_state; }, 1.0));
  out.push_back({"configuration",
                 "overlap_param_gather (the param all-gather dispatched by DDP's forward "
                 "pre-hooks) over modules the forward calls in another order than they were "
                 "registered in",
                 "overlap_training_call",
                 [] { return forward_order_differs(*overlap_training_call()); }, 0.3, ""});
}

void add_checkpoints(std::vector<InputDimension>& out) {
  const std::string k = "checkpoint";
  out.push_back(drawn(
      k,
      "a resume after some steps (the hybrid optimizer's own state dict, "
      "dp_reshardable)",
      "gen::split_schedule", [] { return gen::split_schedule(false); },
      [](const CaseInputs& in) { return in.split >= 1; }, 1.0));
  out.push_back(drawn(
      k, "the torch format (dp_zero_gather_scatter)", "gen::gathered_case",
      [] { return gen::gathered_case(false); },
      [](const CaseInputs& in) { return in.checkpoint_format == "dp_zero_gather_scatter"; }, 0.3));
  out.push_back(drawn(
      k, "fully_reshardable, loaded at another DP size", "gen::gathered_case",
      [] { return gen::gathered_case(false); },
      [](const CaseInputs& in) {
        return in.checkpoint_format == "fully_reshardable" && in.other_dp != 0;
      },
      0.03));
  out.push_back(drawn(
      k, "a state dict read with map_location=\"cpu\"", "gen::mapped_load_case",
      gen::mapped_load_case, [](const CaseInputs& in) { return in.map_location == "cpu"; }, 0.3));
  out.push_back(drawn(k, "a save before the first step", "draw_hybrid_state_case",
                      draw_hybrid_state_case, saves_before_a_step, 0.02));
  out.push_back(drawn(k, "reload_model_params (weights loaded without optimizer state)",
                      "draw_hybrid_state_case", draw_hybrid_state_case,
                      has_command<state_cmd::ReloadModelParams>, 0.2));
  out.push_back(not_drawn(k,
                          "files read back by torch.load with the pinned torch's default "
                          "(weights_only=True)",
                          "the worker keeps torch-format checkpoints in memory and reads its own "
                          "files with weights_only=False: what the default unpickler refuses is "
                          "never met"));
}

void add_wrappers(std::vector<InputDimension>& out) {
  const std::string k = "wrapper";
  out.push_back({k,
                 "ChainedOptimizer over the dense and the experts' non-distributed optimizers, "
                 "as get_megatron_optimizer chains them",
                 "wrapper_lifecycle_call",
                 [] {
                   const rig::WrapperCall call = *wrapper_lifecycle_call();
                   return has_expert_optimizer(call) && !has_distributed_chain_with_experts(call);
                 },
                 0.08, ""});
  out.push_back({k,
                 "a chain whose dense optimizer is a stub beside trainable experts (every dense "
                 "parameter of the rank frozen, or none there)",
                 "wrapper_lifecycle_call",
                 [] { return has_dense_stub_beside_experts(*wrapper_lifecycle_call()); }, 0.02,
                 ""});
  out.push_back({k,
                 "ChainedOptimizer over the dense and the experts' distributed optimizers, "
                 "sharing one DDP chunk",
                 "wrapper_lifecycle_call",
                 [] { return has_distributed_chain_with_experts(*wrapper_lifecycle_call()); },
                 0.08, ""});
  out.push_back({k,
                 "Float16OptimizerWithFloat16Params and FP32Optimizer "
                 "(use_distributed_optimizer off), stepped, saved and resumed",
                 "wrapper_lifecycle_call",
                 [] { return (*wrapper_lifecycle_call()).wrapper != rig::Wrapper::kDistributed; },
                 0.55, ""});
  out.push_back({k,
                 "a resume with the weights only (--finetune, --no-load-optim) and "
                 "reload_model_params on a non-distributed or stub optimizer",
                 "wrapper_lifecycle_call",
                 [] { return (*wrapper_lifecycle_call()).resume == rig::Resume::kWeights; },
                 0.25, ""});
  out.push_back({k,
                 "a resume with the main params from the checkpoint "
                 "(--load-main-params-from-ckpt: reload_model_params(state_dict)) of an fp32 "
                 "checkpoint, with the distributed optimizer (the other wrappers refuse it)",
                 "wrapper_lifecycle_call",
                 [] {
                   return (*wrapper_lifecycle_call()).resume ==
                          rig::Resume::kMainParamsFromCheckpoint;
                 },
                 0.08, ""});
  out.push_back(not_drawn(k, "LayerWiseDistributedOptimizer (Muon's layer-wise path)",
                          "cannot be built here: get_megatron_optimizer builds it only with the "
                          "emerging-optimizers package (0.2 or later), whose releases need "
                          "Python 3.12, and the pinned environment runs 3.11; it hides G13 "
                          "and G14 (tests/recall/limits.json)"));
  out.push_back(not_drawn(k, "HybridDeviceOptimizer built directly by another training stack",
                          "against real code the hybrid optimizer is reached through the "
                          "distributed optimizer only (HybridOptimizerDirect.* runs on the port)"));
}

void add_devices(std::vector<InputDimension>& out) {
  const std::string d = "device layer";
  out.push_back(not_drawn(d, "CUDA streams out of program order, pinned host memory",
                          "on a CPU machine the worker's streams run in program order and pin "
                          "nothing; the port draws stream orders (StreamSimulation.*) and "
                          "scripts/gpu-check runs the real code on a GPU"));
  out.push_back({d,
                 "Transformer Engine importable where optimizer.py binds its multi-tensor "
                 "copy at import (the fp16 wrapper's copies run through it)",
                 "wrapper_lifecycle_call",
                 [] {
                   const rig::WrapperCall call = *wrapper_lifecycle_call();
                   return call.transformer_engine && call.wrapper == rig::Wrapper::kFp16;
                 },
                 0.03, ""});
  out.push_back(not_drawn(d,
                          "Transformer Engine's multi_tensor_l2norm and multi_tensor_scale_tensor "
                          "in clip_grads.py",
                          "their CUDA kernels sum in an order of their own that a host stand-in "
                          "would only approximate: clip_grads.py's import keeps Megatron's local "
                          "fallbacks, whose norms the properties bound by a named tolerance"));
}

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", share * 100);
  return text;
}

}  // namespace

const std::vector<InputDimension>& input_dimensions() {
  static const std::vector<InputDimension> kAll = [] {
    std::vector<InputDimension> out;
    add_params(out);
    add_steps(out);
    add_groups_and_configuration(out);
    add_ddp_options(out);
    add_checkpoints(out);
    add_wrappers(out);
    add_devices(out);
    return out;
  }();
  return kAll;
}

std::string input_audit_markdown(const std::map<std::string, double>& measured) {
  std::ostringstream out;
  out << "| kind | input Megatron can produce | drawn by | minimum | measured |\n"
      << "| --- | --- | --- | --- | --- |\n";
  for (const InputDimension& d : input_dimensions()) {
    if (!d.generator.empty()) {
      const auto m = measured.find(d.dimension);
      out << "| " << d.kind << " | " << d.dimension << " | `" << d.generator << "` | "
          << percent(d.min_rate) << " | "
          << (m == measured.end() ? std::string("-") : percent(m->second)) << " |\n";
    } else {
      out << "| " << d.kind << " | " << d.dimension << " | not drawn: " << d.why_not
          << " | - | - |\n";
    }
  }
  return out.str();
}

}  // namespace sc::props
