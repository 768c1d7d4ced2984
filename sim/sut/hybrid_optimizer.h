// Port of Megatron's HybridDeviceOptimizer (cpu_offloading/hybrid_optimizer.py): construction
// through torch::optim's add_param_group (the leaf check), the greedy whole-tensor offload split,
// host copies, fp32 copies and the sub-optimizers.
//
// The accelerator side runs on `accelerator` (CUDA, or the CPU standing in for it); host copies
// are pinned only when the accelerator is CUDA. The GPU sub-optimizer is torch::optim::AdamW,
// Megatron's choice when neither Transformer Engine nor Apex is installed.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "sim/sut/torch_fwd.h"

namespace sc::sut {

// The HDO's defaults: AdamW hyper-parameters plus the HDO's own arguments.
struct HdoOptions : public torch::optim::OptimizerCloneableOptions<HdoOptions> {
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 1e-2;
  TORCH_ARG(double, offload_fraction) = 0.5;
  TORCH_ARG(bool, param_update_in_fp32) = false;
  TORCH_ARG(bool, pin_cpu_grads) = true;
  TORCH_ARG(bool, pin_cpu_params) = true;
  TORCH_ARG(bool, overlap_cpu_optimizer_d2h_h2d) = true;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// HybridDeviceOptimizer; construction throws c10::Error("can't optimize a non-leaf Tensor")
// for a non-leaf parameter, exactly where torch.optim raises ValueError.
class HybridDeviceOptimizer : public torch::optim::Optimizer {
 public:
  HybridDeviceOptimizer(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                        const HdoOptions& defaults, torch::Device accelerator);

  // The step flow belongs to the hybrid-optimizer port; construction is what is ported here.
  torch::Tensor step(LossClosure closure = nullptr) override;

  // True when `original` (an HDO parameter) was offloaded to a host copy.
  bool is_offloaded(const torch::Tensor& original) const;
  // The host copy, fp32 copy or the original itself that a sub-optimizer steps.
  torch::Tensor inner_param(const torch::Tensor& original) const;
  // Number of host (CPU) sub-optimizers and whether an accelerator one exists.
  size_t num_cpu_optimizers() const { return cpu_optimizers_.size(); }
  bool has_gpu_optimizer() const { return gpu_optimizer_ != nullptr; }
  const HdoOptions& hdo_defaults() const;

 private:
  void init_sub_optimizers();

  torch::Device accelerator_;
  std::map<const void*, torch::Tensor> param_to_fp32_param_;
  std::map<const void*, torch::Tensor> gpu_params_map_cpu_copy_;
  std::map<const void*, torch::Tensor> param_to_inner_param_;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> cpu_optimizers_;
  std::unique_ptr<torch::optim::Optimizer> gpu_optimizer_;
};

}  // namespace sc::sut
