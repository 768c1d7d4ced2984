// The grad-stats group of one rank under test, for the port: the SUM all-reduce of the squared
// grad norm and of the zero count (sut::GradStatsSum), with the group's other ranks simulated.
// Those are the instance's other DP ranks, which hold the same DP-reduced grads: each computes
// its share with the port's own functions (sut::local_grad_norm_squared, sut::local_zero_count)
// over its shards as the model plans them, unscaled and clipped as its step would. The shares
// are added in rank order in the tensor's dtype. Their grads live on the rank's accelerator, so
// that their products round as its own do.
#pragma once

#include <optional>
#include <vector>

#include "model/shard.h"
#include "model/spec.h"
#include "sim/port/torch_pch.h"

namespace sc::rig {

class GradStatsGroupSim {
 public:
  GradStatsGroupSim(const model::CaseSpec& spec, model::Instance instance, int64_t rank,
                    double clip_grad, torch::Device device);
  // Before each step: the DP-reduced grads of every case parameter, and the `inv_scale` the
  // main grads are unscaled by (1 without a loss scaler).
  void begin_step(const std::vector<std::vector<float>>& grads, float inv_scale);
  // The all-reduce: a one-element fp32 tensor is a squared norm, an int64 one a zero count.
  void all_reduce_sum(torch::Tensor& tensor);

 private:
  // Rank `rank`'s main grads, in its optimizer groups' order.
  std::vector<torch::Tensor> main_grads_of(int64_t rank) const;

  model::CaseSpec spec_;
  int64_t rank_;
  double clip_grad_;
  torch::Device device_;
  std::vector<model::RankPlan> plans_;  // every rank of the instance
  std::vector<std::vector<float>> grads_;
  float inv_scale_ = 1.0f;
  std::optional<double> total_norm_;  // this step's global norm, once reduced
  // Each other rank's main grads, made once a step: the norm is reduced before the zero count,
  // which then clips the same tensors in place.
  std::vector<std::vector<torch::Tensor>> others_;
};

}  // namespace sc::rig
