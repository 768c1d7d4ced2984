// The numerical reference of one rank: what every owned piece of every model parameter must
// hold after each step, under Megatron's precision rules and single-device AdamW.
//
// Each owned piece has an fp32 master (the fp32 model parameter itself, or an fp32 copy of a
// 16-bit one), stepped with the DP-reduced gradient rounded to the grad buffer's dtype; the model
// parameter is the master rounded to its dtype. The update follows the operation order of the
// sub-optimizer that steps the piece (LibTorch's CPU AdamW on the host or in the plain
// distributed optimizer, FusedAdam on the accelerator or, precision-aware without offload, for
// every piece), so comparisons with the port are exact.
//
// Precision-aware without offload, a bf16 piece kept as bf16 + int16 remainder (the default
// store_param_remainders) receives model::bf16_half_of_split_master of its master: the only
// rounding that format can express. A group holding both fp16 and bf16 pieces cannot be stepped
// by that FusedAdam: step_error() names the error the first step raises.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/offload_plan.h"
#include "model/shard.h"
#include "model/spec.h"
#include "model/step_inputs.h"

namespace sc::model {

// Whether a grad of `instance`'s parameters holds inf or NaN once rounded to its grad buffer's
// dtype: what the found-inf check, MAX-reduced over the DP group, finds.
bool grads_non_finite(const CaseSpec& spec, Instance instance, const StepInputs& in);

// Which implementation steps a piece: torch 2.11's AdamW, as its default loop (single-tensor on
// CPU tensors, foreach on CUDA tensors) or as the fused kernel (`fused=True`, which Megatron's
// factory gives the hybrid optimizer's sub-optimizers) on CPU or CUDA tensors, or Transformer
// Engine's FusedAdam.
enum class UpdatePath {
  kTorchSingleTensor,
  kTorchForeachCuda,
  kTorchFused,
  kTorchFusedCuda,
  kFusedAccelerator
};

// The reference of one rank of one instance (copyable; `spec` and `plan` must outlive it).
class RankReference {
 public:
  // `initial[p]` holds parameter p's initial values (representable in its dtype); `kernels`
  // is how the running PyTorch's CPU AdamW kernels round.
  RankReference(const CaseSpec& spec, const RankPlan& plan,
                const std::vector<std::vector<float>>& initial, TorchCpuKernels kernels,
                bool accelerator_is_cuda);

  // Applies one step.
  void step(const StepInputs& in);
  // `reload_model_params`: each master takes the model parameter's value again, so a 16-bit
  // piece's master becomes its rounded value.
  void reload_from_model();
  // Expected model-parameter values of installed entry (g, i) (its piece of the parameter).
  const std::vector<float>& model_piece(size_t g, size_t i) const { return model_[g][i]; }
  // Expected fp32 master of entry (g, i).
  const std::vector<float>& master_piece(size_t g, size_t i) const { return master_[g][i]; }
  // Expected optimizer state of entry (g, i).
  const AdamWState32& state(size_t g, size_t i) const { return state_[g][i]; }
  // The path that steps entry (g, i).
  UpdatePath path(size_t g, size_t i) const { return path_[g][i]; }
  // The offload plan of this rank (empty without offload).
  const OffloadPlan& offload_plan() const { return offload_; }
  // The same with host sub-optimizers grouped as proposal S1 groups them (model/offload_plan.h).
  OffloadPlan offload_plan(std::optional<int64_t> host_min_numel) const;
  // The error the first step raises, if any (empty: steps succeed).
  const std::optional<std::string>& step_error() const { return step_error_; }

 private:
  const CaseSpec* case_;
  const RankPlan* plan_;
  TorchCpuKernels kernels_;
  int64_t steps_ = 0;
  OffloadPlan offload_;
  bool accelerator_is_cuda_;
  bool fused_master_ = false;  // precision-aware FusedAdam with master weights steps every piece
  std::optional<std::string> step_error_;
  std::vector<std::vector<UpdatePath>> path_;
  std::vector<std::vector<std::vector<float>>> master_, model_;
  std::vector<std::vector<AdamWState32>> state_;
};

}  // namespace sc::model
