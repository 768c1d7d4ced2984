#include "sim/port/clip_grads.h"

#include <cmath>

namespace sc::sut {

torch::Tensor local_grad_norm_squared(const std::vector<torch::Tensor>& grads) {
  torch::Tensor grad_norm;
  if (grads.empty()) {
    grad_norm = torch::zeros({1}, torch::kFloat);
  } else {
    // `l2 = [[torch.norm(t) for t in tensor_list] for tensor_list in tensor_lists]`: PyTorch
    // 2.11's `torch.norm(t)` with its default p="fro" and no dim is
    // `torch.linalg.vector_norm(t, 2)` on CPU and CUDA tensors, a 0-dim tensor of t's dtype
    // (accumulated in float for 16-bit inputs); `torch.tensor(l2)` keeps that dtype, shape
    // [1, len(grads)].
    std::vector<torch::Tensor> norms;
    norms.reserve(grads.size());
    for (const auto& t : grads) norms.push_back(at::linalg_vector_norm(t.detach(), 2).cpu());
    const torch::Tensor l2 = torch::stack(norms).unsqueeze(0);
    const torch::Tensor l2_reduced = at::linalg_vector_norm(l2, 2);
    // `torch.tensor([float(l2_reduced)], dtype=torch.float)`: through a Python float (double).
    const double as_python_float = l2_reduced.to(torch::kDouble).item<double>();
    grad_norm = torch::tensor({static_cast<float>(as_python_float)}, torch::kFloat);
  }
  // `total_norm = grad_norm ** norm_type` with norm_type 2.0.
  return grad_norm.pow(2.0);
}

double get_grad_norm_fp32(const std::vector<torch::Tensor>& grads, const GradStatsSum& sum) {
  torch::Tensor total_norm = local_grad_norm_squared(grads);
  if (sum) sum(total_norm);
  // `multi_tensor_scale_tensor_impl` is None on this path: `total_norm.item() ** (1.0 / 2.0)`.
  return std::pow(total_norm.item<double>(), 1.0 / 2.0);
}

NormReduce norm_reduce(double norm_type) {
  return std::isinf(norm_type) ? NormReduce::kMax : NormReduce::kSum;
}

namespace {

// The inf branch: `max(grad.abs().max() for grad in grads)` (the largest magnitude, exact), then
// `torch.tensor([float(total_norm)], dtype=torch.float)`.
torch::Tensor inf_norm_share(const std::vector<torch::Tensor>& grads, bool fixed) {
  if (grads.empty() && !fixed) {
    throw PythonRaised("ValueError", "max() arg is an empty sequence");
  }
  double largest = 0.0;  // F17's fix: `max(..., default=torch.tensor(0.0))`
  for (size_t i = 0; i < grads.size(); ++i) {
    const double m = grads[i].detach().abs().max().to(torch::kDouble).item<double>();
    if (i == 0 || m > largest) largest = m;
  }
  return torch::tensor({static_cast<float>(largest)}, torch::kFloat);
}

// The p branch (p neither 2 nor inf): `total_norm = 0.0`, then `total_norm += torch.norm(grad,
// p) ** p` for each grad, a 0-dim tensor of the grad's dtype from the first on (0.0 + x is x).
// F17's fix starts from `torch.zeros(1)` instead, which adds the same values in the same order.
torch::Tensor p_norm_share(const std::vector<torch::Tensor>& grads, double p, bool fixed) {
  if (grads.empty() && !fixed) {
    throw PythonRaised("TypeError",
                       "Invalid function argument. Expected parameter `tensor` of type "
                       "torch.Tensor but got <class 'float'> instead.");
  }
  if (grads.empty()) return torch::zeros({1}, torch::kFloat);
  torch::Tensor total;  // on the grads' device, as Megatron's
  for (const auto& g : grads) {
    const torch::Tensor term = at::linalg_vector_norm(g.detach(), p).pow(p);
    total = total.defined() ? total + term : term;
  }
  return total.cpu().reshape({1});
}

}  // namespace

torch::Tensor grad_norm_share(const std::vector<torch::Tensor>& grads, double norm_type,
                              bool fixed) {
  if (std::isinf(norm_type)) return inf_norm_share(grads, fixed);
  if (norm_type == 2.0) return local_grad_norm_squared(grads);
  return p_norm_share(grads, norm_type, fixed);
}

double grad_norm_from_reduced(const torch::Tensor& reduced, double norm_type) {
  const double value = reduced.to(torch::kDouble).item<double>();
  return std::isinf(norm_type) ? value : std::pow(value, 1.0 / norm_type);
}

double clip_grad_by_total_norm_fp32(const std::vector<torch::Tensor>& grads, double max_norm,
                                    double total_norm, bool always_scale) {
  const double clip_coeff = max_norm / (total_norm + 1.0e-6);
  if (clip_coeff < 1.0 || always_scale) {
    // `local_multi_tensor_scale`: `dst.copy_(src * scale)` with src and dst the same grads; on
    // PyTorch 2.11 a Python float times a tensor multiplies in the tensor's opmath type (fp32
    // for 16-bit tensors) by the float as that type, then rounds to the tensor's dtype.
    for (const auto& g : grads) g.copy_(g * clip_coeff);
  }
  return clip_coeff;
}

torch::Tensor local_zero_count(const std::vector<torch::Tensor>& grads) {
  torch::Tensor total = torch::zeros({1}, torch::kLong);
  for (const auto& g : grads) {
    total = (g.numel() - torch::count_nonzero(g.detach()).cpu()) + total;
  }
  return total;
}

int64_t count_zeros_fp32(const std::vector<torch::Tensor>& grads, const GradStatsSum& sum) {
  torch::Tensor total = local_zero_count(grads);
  if (sum) sum(total);
  return total.item<int64_t>();
}

}  // namespace sc::sut
