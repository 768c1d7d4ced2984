// Port of Megatron's gradient statistics (megatron/core/optimizer/clip_grads.py at d8b71082) on
// the path Megatron takes without Transformer Engine and Apex, where clip_grads.py binds
// megatron/core/utils.py's `local_multi_tensor_l2_norm` and `local_multi_tensor_scale`:
//
// - the L2 norm of a list of grads is `torch.norm` of each (in the grad's dtype), the norms put
//   in one tensor of that dtype, `torch.norm` of it, then `float(...)` into a one-element fp32
//   tensor; squared (`** 2.0`), SUM-all-reduced over the grad-stats group, and `.item() ** 0.5`
//   in double;
// - clipping multiplies every grad by `max_norm / (total_norm + 1e-6)` (a Python float, so the
//   product rounds in the grad's dtype) when that is below 1;
// - the zero count is `numel - count_nonzero` of every grad, int64, SUM-all-reduced.
//
// The grad-stats group's other ranks are the caller's: `GradStatsSum` adds their share in place.
//
// Called directly (as the optimizer never does) `get_grad_norm_fp32` takes other norm types:
// `inf` (each grad's `abs().max()`, the largest through `float()` into a one-element fp32 tensor,
// MAX-all-reduced, `.item()`) and any other p (`torch.norm(grad, p) ** p` of each grad added to a
// Python `0.0`, SUM-all-reduced, `.item() ** (1 / p)`). At d8b71082 a rank with no grads raises
// there: `max()` of an empty sequence (ValueError) for inf, and for p the all-reduce of the
// Python float `0.0` (TypeError). Megatron fixed both after d8b71082 (#5530, finding F17).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/port/torch_pch.h"

namespace sc::sut {

// `torch.distributed.all_reduce(tensor, op=SUM, group=grad_stats_parallel_group)`, in place, on
// a one-element fp32 (squared norm) or int64 (zero count) tensor.
using GradStatsSum = std::function<void(torch::Tensor&)>;

// `multi_tensor_applier(local_multi_tensor_l2_norm, ..., [grads], False)[0] ** 2.0`, or a zero
// one-element fp32 tensor when `grads` is empty: this rank's share of the squared norm.
torch::Tensor local_grad_norm_squared(const std::vector<torch::Tensor>& grads);

// `get_grad_norm_fp32(grads, norm_type=2, grad_stats_parallel_group)`.
double get_grad_norm_fp32(const std::vector<torch::Tensor>& grads, const GradStatsSum& sum);

// What Python raised, by its class name ("ValueError") and message.
struct PythonRaised : std::runtime_error {
  PythonRaised(std::string type_name, const std::string& message)
      : std::runtime_error(message), type(std::move(type_name)) {}
  std::string type;
};

// How the grad-stats group combines the ranks' shares of a direct `get_grad_norm_fp32` call.
enum class NormReduce { kMax, kSum };
NormReduce norm_reduce(double norm_type);

// This rank's tensor as `get_grad_norm_fp32(grads, norm_type)` hands it to the all-reduce (a
// one-element fp32 tensor: the largest magnitude for inf, the sum of each grad's p-norm to the p
// otherwise; norm type 2 as above). `fixed`: with F17's fix, a rank with no grads shares zero;
// without it, it throws PythonRaised as Megatron at d8b71082 raises.
torch::Tensor grad_norm_share(const std::vector<torch::Tensor>& grads, double norm_type,
                              bool fixed);

// The norm from the all-reduced share: `.item()` for inf, else `.item() ** (1 / norm_type)`.
double grad_norm_from_reduced(const torch::Tensor& reduced, double norm_type);

// `clip_grad_by_total_norm_fp32` on the grads themselves (already collected); returns the
// coefficient, which was applied when below 1. `always_scale` is mutant CLIP-always-scaled.
double clip_grad_by_total_norm_fp32(const std::vector<torch::Tensor>& grads, double max_norm,
                                    double total_norm, bool always_scale = false);

// This rank's share of `count_zeros_fp32`: `numel - count_nonzero` summed over `grads`, int64.
torch::Tensor local_zero_count(const std::vector<torch::Tensor>& grads);

// `count_zeros_fp32(...)`: the local count SUM-all-reduced, `.item()`.
int64_t count_zeros_fp32(const std::vector<torch::Tensor>& grads, const GradStatsSum& sum);

}  // namespace sc::sut
