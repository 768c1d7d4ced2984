#include "model/training.h"

#include <stdexcept>

#include "model/rounding.h"

namespace sc::model {

float backward_grad(DType param_dtype, float g) { return round_to(param_dtype, g); }

StepInputs as_backward_delivers(const CaseSpec& spec, StepInputs in) {
  for (size_t p = 0; p < spec.params.size(); ++p) {
    for (float& g : in.grads[p]) g = backward_grad(spec.params[p].dtype, g);
  }
  return in;
}

float accumulate_into_main_grad(DType grad_dtype, float main_grad, float grad) {
  return round_to(grad_dtype, main_grad + grad);
}

std::vector<float> main_grad_after(const CaseSpec& spec, int param,
                                   const std::vector<std::vector<float>>& passes) {
  const ParamSpec& p = spec.params.at(static_cast<size_t>(param));
  const DType grad_dtype = grad_buffer_dtype(spec, p);
  std::vector<float> out(static_cast<size_t>(p.numel()), 0.0f);
  for (const std::vector<float>& pass : passes) {
    if (pass.size() != out.size()) {
      throw std::invalid_argument("main_grad_after: a pass of another size than the parameter");
    }
    for (size_t k = 0; k < out.size(); ++k) {
      out[k] = accumulate_into_main_grad(grad_dtype, out[k], backward_grad(p.dtype, pass[k]));
    }
  }
  return out;
}

}  // namespace sc::model
