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

#include <optional>

#include "sim/sut/torch_fwd.h"

namespace sc::sut {

class FusedHostAdamW : public torch::optim::AdamW {
 public:
  explicit FusedHostAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                          torch::optim::AdamWOptions defaults = {});
  explicit FusedHostAdamW(std::vector<torch::Tensor> params,
                          torch::optim::AdamWOptions defaults = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
  // False when the last step() ran LibTorch's own step instead of the fused pass.
  bool last_step_was_fused() const { return last_step_fused_; }
  // Fused passes taken by every FusedHostAdamW of the process (a check that a run used them).
  static int64_t fused_steps_taken();

 private:
  bool fast_path_applies() const;
  bool last_step_fused_ = false;
};

// Whether LibTorch's CPU AdamW fuses its two multiply-adds on this machine: found once by
// stepping a 1037-element probe three times with torch::optim::AdamW and with the fused kernel
// in both modes. nullopt when neither mode reproduces LibTorch bit for bit.
std::optional<bool> torch_adamw_fuses_multiply_adds();

}  // namespace sc::sut
