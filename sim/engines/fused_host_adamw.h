// A drop-in host AdamW for the hybrid optimizer's offloaded shards: the same class, options and
// per-parameter state as the port's `torch.optim.AdamW(fused=True)` (sut::TorchAdamW, so
// state_dict, load and the hybrid optimizer's state syncing see no difference), but step()
// makes one multi-threaded, vectorised pass over every element of every parameter
// (adamw_kernel.h), split freely over threads, where torch's fused kernel splits per tensor.
// Results are bit-identical to torch's: the kernel runs the same fp32 operations in the same
// order, with the vector width of torch's kernel on this machine (found once by a probe).
// Strided fp32 views take the same arithmetic through contiguous copies (torch's own fused kernel
// mispairs their elements with their grads, see step_through_copies). Anything else the fast
// path does not cover (AMSGrad, another dtype, sparse tensors, or a machine where the probe
// matches no width) runs torch's own fused step.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "sim/engines/adamw_kernel.h"
#include "sim/port/torch_adamw.h"
#include "sim/port/torch_pch.h"

namespace sc::engines {

class FusedHostAdamW : public sut::TorchAdamW {
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
  // such parameter and its moments plain contiguous fp32 on the CPU, a known body width.
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
  bool fast_path_applies(bool strided_ok) const;
  bool applies(const std::function<bool(const torch::Tensor&)>& has_grad, bool strided_ok) const;
  // Plain fp32 tensors of which some are strided views: stepped through contiguous copies.
  torch::Tensor step_through_copies(LossClosure closure);
  bool last_step_fused_ = false;
  bool strided_fast_path_ = false;
};

// The vector width of torch's fused CPU AdamW body on this machine (its last numel % width
// elements run the scalar tail): found once by stepping a 1037-element probe three times with
// torch's kernel and with ours at each candidate width. nullopt when none reproduces torch's
// bit for bit.
std::optional<int64_t> fused_adamw_body_width();

}  // namespace sc::engines
