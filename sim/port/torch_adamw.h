// `torch.optim.AdamW` of PyTorch 2.11, as Megatron-Core constructs it, on the tensors it is given.
//
// LibTorch's C++ `torch::optim::AdamW` is not what Python's AdamW runs on 2.11: its moment update
// is m*b1 + (1-b1)*g where Python's is `exp_avg.lerp_(grad, 1 - beta1)`, and it has no `fused`
// path. This class keeps the C++ class's state and options (so state dicts, loads and the
// hybrid optimizer's bookkeeping are unchanged) and steps as Python does:
// - `fused=true` (the factory's default for the hybrid optimizer's sub-optimizers): one call of
//   ATen's `_fused_adamw_` over the group's tensors, each with its step as a float tensor
//   incremented first, as `torch.optim.adam._fused_adam` does;
// - otherwise torch's default: on CUDA tensors the foreach loop (`_multi_tensor_adam`, the same
//   `_foreach_*` ops in its order; run on a GPU only), on CPU tensors the single-tensor loop
//   (`_single_tensor_adam` with decoupled weight decay).
#pragma once

#include "sim/port/behaviour.h"
#include "sim/port/torch_pch.h"

namespace sc::sut {

class TorchAdamW : public torch::optim::AdamW {
 public:
  TorchAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, bool fused,
             const Behaviour& behaviour, torch::optim::AdamWOptions defaults = {});

  torch::Tensor step(LossClosure closure = nullptr) override;
  // The group's `fused` key.
  bool fused() const { return fused_; }

 private:
  // The tensors of one step, each parameter's count advanced first.
  struct Lists {
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<int64_t> steps;
  };
  torch::optim::AdamWParamState& state_of(const torch::Tensor& p);
  Lists advance(const std::vector<torch::Tensor>& params);
  void step_single(const torch::optim::AdamWOptions& o, const torch::Tensor& p);
  void step_fused(const torch::optim::AdamWOptions& o, const std::vector<torch::Tensor>& params);
  void step_foreach(const torch::optim::AdamWOptions& o, const std::vector<torch::Tensor>& params);
  static bool on_cuda(const std::vector<torch::Tensor>& params);

  bool fused_;
  // Mutant TORCH-113-moment: AdamW as PyTorch 1.13 ran it, `fused` unread and the
  // single-tensor loop with 1.13's moment update.
  bool moment_113_;
};

}  // namespace sc::sut
