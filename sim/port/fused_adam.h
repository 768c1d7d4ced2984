// A FusedAdam with Transformer Engine's semantics (transformer_engine/pytorch/optimizers/
// fused_adam.py, AdamW mode): one step count per group, incremented at every step() of a
// non-empty group; state initialised for every parameter; parameters whose grad is None skipped;
// `.grad` read unless built with use_decoupled_grad.
//
// With master weights (Megatron's precision-aware optimizer) a 16-bit parameter is stepped
// through an fp32 `master_param` state and receives the master cast to its dtype; a bf16
// parameter with store_param_remainders keeps only the low 16 bits of its master (int16) and the
// parameter is the high half, rounded by the remainder's sign bit (model::bf16_half_of_split_
// master). fp32 parameters are stepped in place; their `master_param` is initialised and never
// updated. A group mixing fp16 and bf16 parameters raises TE's RuntimeError at step().
//
// On CPU tensors the arithmetic runs in C++ in the kernel's order (every operation rounded
// separately); CUDA tensors go to the project's multi-tensor kernel when the build has one. The
// 16-bit forms are unpacked into fp32 work tensors and packed again with tensor operations, which
// give the kernel's bits on either device.
#pragma once

#include <map>

#include "sim/port/behaviour.h"
#include "sim/port/tensor_attrs.h"
#include "sim/port/torch_pch.h"

namespace sc::sut {

// Group options of FusedAdam.
struct FusedAdamOptions : public torch::optim::OptimizerCloneableOptions<FusedAdamOptions> {
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.999;
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0.0;
  TORCH_ARG(int64_t, step) = 0;  // the group's step count (`group["step"]`)
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// Per-parameter state: exp_avg, exp_avg_sq and, with master weights, master_param (fp32, or
// the int16 remainders of a bf16 parameter).
struct FusedAdamState : public torch::optim::OptimizerCloneableParamState<FusedAdamState> {
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);
  TORCH_ARG(torch::Tensor, master_param);
};

// Constructor flags of TE's FusedAdam that Megatron sets.
struct FusedAdamFlags {
  bool use_decoupled_grad = false;
  bool master_weights = false;
  // Takes effect only with master_weights (the master dtype is always fp32 here).
  bool store_param_remainders = false;
};

class FusedAdam : public torch::optim::Optimizer {
 public:
  FusedAdam(std::vector<torch::optim::OptimizerParamGroup> groups, const FusedAdamOptions& defaults,
            const TensorAttrs* attrs, const FusedAdamFlags& flags, const Behaviour& behaviour);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // The state of `param`, nullptr before its first step.
  const FusedAdamState* state_of(const torch::Tensor& param) const;
  // Replaces exp_avg and exp_avg_sq of `param` (the hybrid optimizer's state sync).
  void set_state(const torch::Tensor& param, torch::Tensor exp_avg, torch::Tensor exp_avg_sq);
  // `set_scaled_state(param, "master_param", value)` for fp32 state: copies `value` (fp32, or
  // int16 remainders for a bf16 parameter with store_param_remainders) into the existing state.
  void set_master_state(const torch::Tensor& param, const torch::Tensor& value);
  // The fp32 master of `param` as the next step reads it: the fp32 parameter itself, the fp32
  // master_param, or the bf16 parameter joined with its remainders.
  torch::Tensor master_of(const torch::Tensor& param) const;
  // `initialize_state(param)`: zero moments and, with master weights, the master from `param`.
  void initialize_state(const torch::Tensor& param);
  // TE's load_state_dict for one parameter: a fresh entry, each item through set_scaled_state
  // (master: int16 remainders for a remainder-keeping bf16 parameter, else cast to fp32).
  void load_state_entry(const torch::Tensor& param, const torch::Tensor& exp_avg,
                        const torch::Tensor& exp_avg_sq, const torch::Tensor& master);
  const FusedAdamFlags& flags() const { return flags_; }

 private:
  bool keeps_remainders(const torch::Tensor& param) const;

  const TensorAttrs* attrs_;
  FusedAdamFlags flags_;
  Behaviour behaviour_;
  int64_t shared_step_ = 0;  // mutant DS-04 only
};

// The fp32 master of the remainder format: the bf16 bits of `param` (one less when the remainder
// is negative) above the remainder's 16 bits. Any device; exposed for tests.
torch::Tensor join_remainder_master(const torch::Tensor& param_bf16, const torch::Tensor& rem);
// Splits fp32 `master` into `param_bf16` (the high half, plus one when the low half's top bit is
// set) and `rem` (the low half as int16), in place.
void split_remainder_master(const torch::Tensor& master, torch::Tensor& param_bf16,
                            torch::Tensor& rem);

// One of the bias corrections Transformer Engine's host code hands the kernel for `step`: the beta
// arrives as a float, `1 - std::pow(beta, step)` promotes it to double, and the result is assigned
// to a float. `from_double_beta` is the old port's formula (the mutant FID-bc-double-beta): the
// double beta, before it is rounded to float.
float te_bias_correction(double beta, int64_t step, bool from_double_beta = false);

// Runs the kernel's arithmetic over one fp32 tensor on the CPU (in place); exposed for tests.
void fused_adam_cpu(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                    int64_t count, float lr, float beta1, float beta2, float eps,
                    float weight_decay, float bc1, float bc2, bool mutant_tail_momentum);

}  // namespace sc::sut
