// A FusedAdam with Transformer Engine's semantics (transformer_engine/pytorch/optimizers/
// fused_adam.py, AdamW mode, no master weights): one step count per group, incremented at every
// step() of a non-empty group; state initialised for every parameter; parameters whose grad is
// None skipped; `.grad` read unless built with use_decoupled_grad.
//
// On CPU tensors the arithmetic runs in C++ in the kernel's order (every operation rounded
// separately); CUDA tensors go to the project's multi-tensor kernel when the build has one.
#pragma once

#include <map>

#include "sim/sut/behaviour.h"
#include "sim/sut/tensor_attrs.h"
#include "sim/sut/torch_fwd.h"

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

// Per-parameter state: exp_avg and exp_avg_sq.
struct FusedAdamState : public torch::optim::OptimizerCloneableParamState<FusedAdamState> {
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);
};

class FusedAdam : public torch::optim::Optimizer {
 public:
  FusedAdam(std::vector<torch::optim::OptimizerParamGroup> groups, const FusedAdamOptions& d,
            const TensorAttrs* attrs, bool use_decoupled_grad, const Behaviour& behaviour);
  torch::Tensor step(LossClosure closure = nullptr) override;
  // exp_avg / exp_avg_sq of `p`, undefined before its first step.
  const FusedAdamState* state_of(const torch::Tensor& p) const;
  // Replaces the state of `p` (the hybrid optimizer's state sync).
  void set_state(const torch::Tensor& p, torch::Tensor exp_avg, torch::Tensor exp_avg_sq);

 private:
  const TensorAttrs* attrs_;
  bool use_decoupled_grad_;
  Behaviour behaviour_;
  int64_t shared_step_ = 0;  // mutant DS-04 only
};

// Runs the kernel's arithmetic over one fp32 tensor on the CPU (in place); exposed for tests.
void fused_adam_cpu(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2,
                    bool mutant_tail_momentum);

}  // namespace sc::sut
