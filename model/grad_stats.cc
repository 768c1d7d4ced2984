#include "model/grad_stats.h"

#include <algorithm>
#include <cmath>

#include "model/rounding.h"

namespace sc::model {

namespace {

bool in_instance(const ParamSpec& param, Instance instance) {
  return param.is_expert == (instance == Instance::kExpert);
}

// A product rounded as PyTorch rounds it in the main grad's dtype (fp32 opmath, then the dtype).
float times(const CaseSpec& spec, const ParamSpec& param, float x, float factor) {
  return round_to(main_grad_dtype(spec, param), x * factor);
}

}  // namespace

DType main_grad_dtype(const CaseSpec& spec, const ParamSpec& param) {
  if (!spec.precision_aware) return DType::kFloat32;
  return grad_buffer_dtype(spec, param);
}

float main_grad(const CaseSpec& spec, const ParamSpec& param, float x, const StepInputs& in) {
  const DType buffer = grad_buffer_dtype(spec, param);
  float g = round_to(buffer, x);
  if (in.inv_scale != 1.0f) g = times(spec, param, g, in.inv_scale);
  if (in.clip_coeff < 1.0) {
    g = times(spec, param, g, static_cast<float>(in.clip_coeff));
  }
  return g;
}

namespace {

// The sum of the squares of parameter p's unscaled main grads, in double.
double squares(const CaseSpec& spec, size_t p, const StepInputs& in) {
  StepInputs unclipped = in;
  unclipped.clip_coeff = 1.0;
  double sum = 0;
  for (float x : in.grads.at(p)) {
    const double g = main_grad(spec, spec.params[p], x, unclipped);
    sum += g * g;
  }
  return sum;
}

}  // namespace

double exact_grad_norm(const CaseSpec& spec, Instance instance, const StepInputs& in) {
  double sum = 0;
  for (size_t p = 0; p < spec.params.size(); ++p) {
    if (in_instance(spec.params[p], instance)) sum += squares(spec, p, in);
  }
  return std::sqrt(sum);
}

double exact_param_grad_norm(const CaseSpec& spec, size_t param, const StepInputs& in) {
  return std::sqrt(squares(spec, param, in));
}

GradNormShape grad_norm_shape(const CaseSpec& spec, Instance instance) {
  GradNormShape shape;
  for (const ParamSpec& p : spec.params) {
    if (!in_instance(p, instance)) continue;
    shape.largest = std::max(shape.largest, p.numel());
    ++shape.tensors;
    shape.elements += p.numel();
    const DType d = main_grad_dtype(spec, p);
    shape.has_fp16 = shape.has_fp16 || d == DType::kFloat16;
    if (mantissa_bits(d) < mantissa_bits(shape.dtype)) shape.dtype = d;
    shape.min_subnormal = std::max(shape.min_subnormal, min_subnormal(d));
  }
  return shape;
}

double clip_coefficient(double max_norm, double total_norm) {
  return max_norm / (total_norm + 1.0e-6);
}

int64_t zeros_in_main_grads(const CaseSpec& spec, Instance instance, const StepInputs& in) {
  int64_t zeros = 0;
  for (size_t p = 0; p < spec.params.size(); ++p) {
    if (!in_instance(spec.params[p], instance)) continue;
    for (float x : in.grads.at(p)) {
      zeros += main_grad(spec, spec.params[p], x, in) == 0.0f;
    }
  }
  return zeros;
}

double exact_p_norm(const std::vector<std::vector<float>>& tensors, double p) {
  double total = 0.0;
  for (const std::vector<float>& t : tensors) {
    for (const float x : t) {
      const double a = std::fabs(static_cast<double>(x));
      total = std::isinf(p) ? std::max(total, a) : total + std::pow(a, p);
    }
  }
  return std::isinf(p) ? total : std::pow(total, 1.0 / p);
}

}  // namespace sc::model
