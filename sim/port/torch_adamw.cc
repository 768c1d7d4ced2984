#include "sim/port/torch_adamw.h"

#include <cmath>

#include "sim/port/optim_state.h"

namespace sc::sut {

TorchAdamW::TorchAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, bool fused,
                       const Behaviour& behaviour, torch::optim::AdamWOptions defaults)
    : torch::optim::AdamW(std::move(groups), std::move(defaults)),
      fused_(fused),
      moment_113_(behaviour.has(Deviation::kTorch113Moment)) {}

torch::optim::AdamWParamState& TorchAdamW::state_of(const torch::Tensor& p) {
  auto it = state_.find(optim_state_key(p));
  if (it == state_.end()) {
    // `_init_group`: step 0, both moments `zeros_like(p, memory_format=preserve_format)`.
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(0);
    s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = state_.emplace(optim_state_key(p), std::move(s)).first;
  }
  return static_cast<torch::optim::AdamWParamState&>(*it->second);
}

torch::Tensor TorchAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  const torch::Tensor loss = closure_loss(closure);
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> with_grad;
    for (const auto& p : group.params()) {
      if (p.grad().defined()) with_grad.push_back(p);
    }
    if (fused_ && !moment_113_) {
      step_fused(o, with_grad);
    } else if (on_cuda(with_grad) && !moment_113_) {
      step_foreach(o, with_grad);  // torch's default for CUDA tensors
    } else {
      for (const auto& p : with_grad) step_single(o, p);
    }
  }
  return loss;
}

void TorchAdamW::step_single(const torch::optim::AdamWOptions& o, const torch::Tensor& p) {
  auto& s = state_of(p);
  const auto [beta1, beta2] = o.betas();
  const torch::Tensor grad = p.grad();
  torch::Tensor param = p.detach();
  s.step(s.step() + 1);
  if (o.weight_decay() != 0) param.mul_(1 - o.lr() * o.weight_decay());
  if (moment_113_) {
    s.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
  } else {
    s.exp_avg().lerp_(grad, 1 - beta1);
  }
  s.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  // `step = _get_value(step_t)`: the float32 step tensor's value, a Python float.
  const double step = static_cast<double>(static_cast<float>(s.step()));
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = o.lr() / bias_correction1;
  const double bias_correction2_sqrt = std::pow(bias_correction2, 0.5);
  const torch::Tensor denom = (s.exp_avg_sq().sqrt() / bias_correction2_sqrt).add_(o.eps());
  param.addcdiv_(s.exp_avg(), denom, -step_size);
}

bool TorchAdamW::on_cuda(const std::vector<torch::Tensor>& params) {
  if (params.empty()) return false;
  for (const auto& p : params) {
    if (!p.is_cuda()) return false;
  }
  return true;
}

TorchAdamW::Lists TorchAdamW::advance(const std::vector<torch::Tensor>& params) {
  Lists l;
  for (const auto& p : params) {
    auto& s = state_of(p);
    s.step(s.step() + 1);  // `step_t += 1` / `_foreach_add_(state_steps, 1)`, before the math
    l.params.push_back(p.detach());
    l.grads.push_back(p.grad());
    l.exp_avgs.push_back(s.exp_avg());
    l.exp_avg_sqs.push_back(s.exp_avg_sq());
    l.steps.push_back(s.step());
  }
  return l;
}

void TorchAdamW::step_foreach(const torch::optim::AdamWOptions& o,
                              const std::vector<torch::Tensor>& params) {
  // `_multi_tensor_adam` with decoupled weight decay, not capturable, float betas and lr.
  Lists l = advance(params);
  const auto [beta1, beta2] = o.betas();
  std::vector<at::Scalar> bc2_sqrt, step_size;
  for (int64_t k : l.steps) {
    const double step = static_cast<double>(static_cast<float>(k));
    step_size.emplace_back((o.lr() / (1 - std::pow(beta1, step))) * -1);
    bc2_sqrt.emplace_back(std::pow(1 - std::pow(beta2, step), 0.5));
  }
  if (o.weight_decay() != 0) at::_foreach_mul_(l.params, 1 - o.lr() * o.weight_decay());
  at::_foreach_lerp_(l.exp_avgs, l.grads, 1 - beta1);
  at::_foreach_mul_(l.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(l.exp_avg_sqs, l.grads, l.grads, 1 - beta2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(l.exp_avg_sqs);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, o.eps());
  at::_foreach_addcdiv_(l.params, l.exp_avgs, denom, step_size);
}

void TorchAdamW::step_fused(const torch::optim::AdamWOptions& o,
                            const std::vector<torch::Tensor>& params) {
  if (params.empty()) return;
  const Lists l = advance(params);
  // The kernel reads each step from a float32 tensor on the parameter's device.
  std::vector<torch::Tensor> steps;
  for (size_t i = 0; i < params.size(); ++i) {
    steps.push_back(torch::full({}, static_cast<float>(l.steps[i]),
                                torch::TensorOptions().dtype(torch::kFloat).device(params[i].device())));
  }
  const auto [beta1, beta2] = o.betas();
  at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, {}, steps, o.lr(), beta1, beta2,
                    o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
}

}  // namespace sc::sut
