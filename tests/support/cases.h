// Literal cases for deterministic tests: a case with one parameter, the rest at defaults, for
// the test to adjust.
#pragma once

#include <string>
#include <vector>

#include "model/adamw.h"
#include "model/reference.h"
#include "model/spec.h"

namespace sc::test {

// A case holding one parameter `name` of `shape` and `dtype` (keep_in_fp32 set for fp32).
inline model::CaseSpec one_param_case(const std::string& name, std::vector<int64_t> shape,
                                      model::DType dtype) {
  model::ParamSpec p;
  p.name = name;
  p.shape = std::move(shape);
  p.dtype = dtype;
  p.keep_in_fp32 = dtype == model::DType::kFloat32;
  model::CaseSpec c;
  c.params = {p};
  return c;
}

// One step's inputs for a case of one 1-element parameter: grad `grad`, lr 1e-3, default betas
// and eps, no weight decay.
inline model::StepInputs one_grad_step(float grad) {
  model::StepInputs in;
  in.grads = {{grad}};
  in.group_hyper = {model::AdamWHyper{1e-3, 0.9, 0.999, 1e-8, 0.0}};
  return in;
}

}  // namespace sc::test
