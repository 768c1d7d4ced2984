// A drop-in host AdamW for the hybrid optimizer's offloaded shards: the same class, options and
// per-parameter state as `torch::optim::AdamW` (so state_dict, load and the hybrid optimizer's
// state syncing see no difference), but step() makes one multi-threaded, vectorised pass over
// every element of every parameter (sut/adamw_kernel.h) instead of LibTorch's nine tensor ops,
// each a pass over memory. Results are bit-identical to LibTorch's step: the kernel runs the
// same fp32 operations in the same order, in the FMA mode that LibTorch's own kernel uses on
// this machine (found once by a probe). Anything the fast path does not cover (AMSGrad, another
// dtype, non-contiguous or sparse tensors, or a machine where the probe matches neither mode)
// runs LibTorch's own step.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "sim/engines/adamw_kernel.h"
#include "sim/port/torch_pch.h"

namespace sc::engines {

class FusedHostAdamW : public torch::optim::AdamW {
 public:
  // `strided_fast_path`: the ENG-strided-fast-path mutant (the fast path also takes strided
  // views, reading them as if contiguous); false everywhere but in the suite's mutants.
  explicit FusedHostAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                          torch::optim::AdamWOptions defaults = {}, bool strided_fast_path = false);
  explicit FusedHostAdamW(std::vector<torch::Tensor> params,
                          torch::optim::AdamWOptions defaults = {});
  torch::Tensor step(LossClosure closure = nullptr) override;

  // One parameter's share of a step taken in pieces by a caller that supplies the grad itself
  // (the hybrid optimizer's pipelined offload): the parameter, its moments and the step's fp32
  // scalars; `fresh` when this step made its state.
  struct Span {
    torch::Tensor param, exp_avg, exp_avg_sq;
    AdamWScalars scalars;
    bool fresh = false;
  };
  // Whether the pass can take a step whose grads `has_grad` says are defined: no AMSGrad, every
  // such parameter and its moments plain contiguous fp32 on the CPU, a known FMA mode.
  bool external_step_applies(const std::function<bool(const torch::Tensor&)>& has_grad) const;
  // The bookkeeping of step() without the pass over memory (external_step_applies() must hold):
  // for every parameter `has_grad` accepts, in group order, the state is made at the first step
  // and the count advanced, as step() does.
  std::vector<Span> begin_external_step(const std::function<bool(const torch::Tensor&)>& has_grad);
  // Elements [lo, hi) of `span`'s step with grads `grad` (grad[0] is element lo), multi-threaded:
  // bit-identical to step() over those elements.
  static void step_span(const Span& span, const float* grad, int64_t lo, int64_t hi);
  // False when the last step() ran LibTorch's own step instead of the fused pass.
  bool last_step_was_fused() const { return last_step_fused_; }
  // Fused passes taken by every FusedHostAdamW of the process (a check that a run used them).
  static int64_t fused_steps_taken();

 private:
  bool fast_path_applies() const;
  bool last_step_fused_ = false;
  bool strided_fast_path_ = false;
};

// Whether LibTorch's CPU AdamW fuses its two multiply-adds on this machine: found once by
// stepping a 1037-element probe three times with torch::optim::AdamW and with the fused kernel
// in both modes. nullopt when neither mode reproduces LibTorch bit for bit.
std::optional<bool> torch_adamw_fuses_multiply_adds();

}  // namespace sc::engines
