#include "sim/port/ddp_hooks.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace sc::sut {

namespace {

// `hook(*unused)` of `_make_backward_post_hook`, run after the accumulator has written `.grad`.
class BackwardPostHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit BackwardPostHook(ModelParam* param) : param_(param) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& grad_inputs,
      const torch::autograd::variable_list& /*grad_outputs*/) override {
    torch::Tensor& grad = param_->param.mutable_grad();
    if (grad.defined() && !param_->grad_added_to_main_grad) {
      torch::NoGradGuard no_grad;
      param_->main_grad.add_(grad.detach());
    }
    grad = torch::Tensor();
    return grad_inputs;
  }

 private:
  ModelParam* param_;
};

}  // namespace

DdpGradHooks::DdpGradHooks(std::vector<ModelParam>& params) {
  for (ModelParam& p : params) {
    p.grad_added_to_main_grad = false;
    if (!p.param.requires_grad()) continue;
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(p.param);
    acc->add_post_hook(std::make_unique<BackwardPostHook>(&p));
    grad_accs_.push_back(std::move(acc));
  }
}

DdpGradHooks::~DdpGradHooks() = default;

void zero_grad_buffer(std::vector<ModelParam>& params,
                      const std::vector<const ParamAndGradBuffer*>& buffers,
                      const Behaviour& behaviour) {
  for (ModelParam& p : params) p.grad_added_to_main_grad = false;
  for (const ParamAndGradBuffer* b : buffers) {
    // Mutant TRAIN-zero-skips-expert: `self.buffers` only, not `self.expert_parallel_buffers`.
    if (behaviour.has(Deviation::kZeroGradBufferSkipsExpert) && b->key().is_expert_parallel)
      continue;
    b->grad_data().zero_();
  }
}

}  // namespace sc::sut
