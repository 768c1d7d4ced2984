#include "model/reference.h"

#include <cmath>

#include "model/grad_stats.h"
#include "model/rounding.h"

namespace sc::model {

namespace {

// With Transformer Engine the factory's Adam is TE's FusedAdam, except on the hybrid optimizer's
// host side; without TE it is torch's AdamW everywhere. The hybrid optimizer's sub-optimizers
// (both sides) receive the factory's `fused=True`; the plain distributed optimizer's AdamW runs
// torch's default, the single-tensor loop on CPU tensors.
// torch's kernels round differently on CUDA tensors: a piece left on a CUDA accelerator takes
// their CUDA paths (foreach is torch's default there).
UpdatePath update_path(const CaseSpec& spec, bool offloaded, bool accelerator_is_cuda) {
  const bool on_cuda = accelerator_is_cuda && !offloaded;
  if (spec.cpu_offload && (offloaded || !spec.transformer_engine)) {
    return on_cuda ? UpdatePath::kTorchFusedCuda : UpdatePath::kTorchFused;
  }
  if (!spec.transformer_engine) {
    return on_cuda ? UpdatePath::kTorchForeachCuda : UpdatePath::kTorchSingleTensor;
  }
  return UpdatePath::kFusedAccelerator;
}

std::vector<std::vector<HdoTensor>> hdo_tensors(const RankPlan& plan) {
  std::vector<std::vector<HdoTensor>> tensors;
  for (const GroupPlan& g : plan.groups) {
    std::vector<HdoTensor> ts;
    for (const ShardEntry& e : g.installed) ts.push_back(HdoTensor{e.param_range.size(), e.dtype});
    tensors.push_back(std::move(ts));
  }
  return tensors;
}

}  // namespace

OffloadPlan RankReference::offload_plan(std::optional<int64_t> host_min_numel) const {
  HdoConfig config{case_->offload_fraction, true, case_->overlap_cpu_optimizer_d2h_h2d,
                   accelerator_is_cuda_, host_min_numel};
  return plan_offload(hdo_tensors(*plan_), config);
}

RankReference::RankReference(const CaseSpec& spec, const RankPlan& plan,
                             const std::vector<std::vector<float>>& initial,
                             TorchCpuKernels kernels, bool accelerator_is_cuda)
    : case_(&spec),
      plan_(&plan),
      kernels_(kernels),
      accelerator_is_cuda_(accelerator_is_cuda),
      fused_master_(spec.precision_aware && !spec.cpu_offload) {
  if (spec.cpu_offload) offload_ = offload_plan(std::nullopt);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    std::vector<UpdatePath> paths;
    std::vector<std::vector<float>> masters;
    for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
      const ShardEntry& e = plan.groups[g].installed[i];
      paths.push_back(update_path(spec, spec.cpu_offload && offload_.placements[g][i].offloaded,
                                  accelerator_is_cuda));
      const auto& full = initial.at(e.param);
      masters.emplace_back(full.begin() + e.param_range.start, full.begin() + e.param_range.end);
    }
    path_.push_back(std::move(paths));
    if (fused_master_ && !step_error_) {
      bool fp16 = false, bf16 = false;
      for (const ShardEntry& e : plan.groups[g].installed) {
        fp16 = fp16 || e.dtype == DType::kFloat16;
        bf16 = bf16 || e.dtype == DType::kBFloat16;
      }
      if (fp16 && bf16) {
        step_error_ = spec.store_param_remainders
                          ? "FusedAdam doesn't support a mix of FP16/BF16 weights + Store param "
                            "remainder."
                          : "FusedAdam does not support a mix of float16 and bfloat16 model "
                            "weights.";
      }
    }
    model_.push_back(masters);
    master_.push_back(std::move(masters));
    state_.emplace_back(plan.groups[g].installed.size());
  }
}

bool grads_non_finite(const CaseSpec& spec, Instance instance, const StepInputs& in) {
  for (size_t p = 0; p < spec.params.size(); ++p) {
    if (spec.params[p].is_expert != (instance == Instance::kExpert)) continue;
    const DType grad_dtype = grad_buffer_dtype(spec, spec.params[p]);
    for (float x : in.grads.at(p)) {
      if (!std::isfinite(round_to(grad_dtype, x))) return true;
    }
  }
  return false;
}

void RankReference::step(const StepInputs& in) {
  if (in.skip) return;  // found inf: no sub-optimizer steps, no count advances
  ++steps_;
  for (size_t g = 0; g < plan_->groups.size(); ++g) {
    const AdamWHyper& h = in.group_hyper.at(plan_->groups[g].group);
    for (size_t i = 0; i < plan_->groups[g].installed.size(); ++i) {
      const ShardEntry& e = plan_->groups[g].installed[i];
      const ParamSpec& p = case_->params[e.param];
      const auto& full = in.grads.at(e.param);
      std::vector<float> grad(full.begin() + e.param_range.start,
                              full.begin() + e.param_range.end);
      for (float& x : grad) x = main_grad(*case_, p, x, in);
      std::vector<float>& master = master_[g][i];
      switch (path_[g][i]) {
        case UpdatePath::kTorchSingleTensor:
          adamw_step_torch_single(master, grad, state_[g][i], h, kernels_);
          break;
        case UpdatePath::kTorchForeachCuda:
          adamw_step_torch_foreach_cuda(master, grad, state_[g][i], h);
          break;
        case UpdatePath::kTorchFused:
          adamw_step_torch_fused_cpu(master, grad, state_[g][i], h, kernels_.fused_width);
          break;
        case UpdatePath::kTorchFusedCuda:
          adamw_step_torch_fused_cuda(master, grad, state_[g][i], h);
          break;
        case UpdatePath::kFusedAccelerator:
          adamw_step_fused(master, grad, state_[g][i], h, steps_);
          break;
      }
      const bool split = fused_master_ && case_->store_param_remainders &&
                         p.dtype == DType::kBFloat16;
      for (size_t k = 0; k < master.size(); ++k) {
        model_[g][i][k] = split ? bf16_half_of_split_master(master[k]) : round_to(p.dtype, master[k]);
      }
    }
  }
}

}  // namespace sc::model

namespace sc::model {

void RankReference::reload_from_model() {
  for (size_t g = 0; g < plan_->groups.size(); ++g) {
    for (size_t i = 0; i < plan_->groups[g].installed.size(); ++i) {
      master_[g][i] = model_[g][i];
    }
  }
}

}  // namespace sc::model
