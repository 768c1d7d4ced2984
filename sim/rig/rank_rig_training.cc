// RankRig in the training loop (Target::training_loop): the forward and backward pass whose
// gradients reach the main grads through the port's DDP hooks (sim/port/ddp_hooks.h).
#include <stdexcept>

#include "sim/rig/rank_rig.h"
#include "sim/rig/rank_rig_impl.h"

namespace sc::rig {

namespace {

// The loss's share of one parameter: (param * G).sum(), G holding `grad` in the parameter's
// dtype and shape, so that autograd hands the parameter exactly G.
torch::Tensor loss_term(const torch::Tensor& param, const std::vector<float>& grad) {
  if (static_cast<int64_t>(grad.size()) != param.numel()) {
    throw std::invalid_argument("backward: a gradient of another size than its parameter");
  }
  const torch::Tensor g =
      torch::from_blob(const_cast<float*>(grad.data()), {param.numel()}, torch::kFloat)
          .to(param.device(), param.scalar_type())
          .view(param.sizes());
  return (param * g).sum();
}

ObservedGrad observe_grad(const sut::ModelParam& mp, int case_param) {
  ObservedGrad o;
  o.param = case_param;
  o.requires_grad = mp.param.requires_grad();
  o.is_leaf = mp.param.is_leaf();
  o.grad_is_none = !mp.param.grad().defined();
  o.main_grad = to_floats(mp.main_grad);
  return o;
}

}  // namespace

std::vector<ObservedGrad> RankRig::backward(const std::vector<std::vector<float>>& grads) {
  RankRigImpl& r = *impl_;
  if (!r.training_loop) throw std::logic_error("RankRig::backward: not built in a training loop");
  r.drain();
  torch::Tensor loss;
  for (size_t i = 0; i < r.params.size(); ++i) {
    const torch::Tensor& p = r.params[i].param;
    if (!p.requires_grad()) continue;
    const torch::Tensor term = loss_term(p, grads.at(static_cast<size_t>(r.case_index[i])));
    loss = loss.defined() ? loss + term.to(torch::kFloat) : term.to(torch::kFloat);
  }
  if (loss.defined()) loss.backward();
  std::vector<ObservedGrad> out;
  for (size_t i = 0; i < r.params.size(); ++i) out.push_back(observe_grad(r.params[i], r.case_index[i]));
  return out;
}

}  // namespace sc::rig
