#include "sim/rig/initial_values.h"

#include <cstring>
#include <sstream>

#include "sim/port/torch_pch.h"
#include "sim/rig/dtypes.h"
#include "sim/rig/rng.h"

namespace sc::rig {

namespace {

// `values` rounded to `dtype` (round to nearest even, as LibTorch converts) and widened back.
std::vector<float> rounded(std::vector<float> values, model::DType dtype) {
  if (dtype == model::DType::kFloat32 || dtype == model::DType::kFloat64) return values;
  torch::Tensor t = torch::from_blob(values.data(), {static_cast<int64_t>(values.size())},
                                     torch::kFloat)
                        .to(to_torch_dtype(dtype))
                        .to(torch::kFloat)
                        .contiguous();
  std::memcpy(values.data(), t.data_ptr<float>(), values.size() * sizeof(float));
  return values;
}

}  // namespace

ParamValues initial_values(const model::CaseSpec& spec, uint64_t seed) {
  SplitMix64 rng(seed);
  ParamValues out;
  for (const model::ParamSpec& p : spec.params) {
    std::vector<float> values(static_cast<size_t>(p.numel()));
    for (float& v : values) v = rng.symmetric_unit();
    out.push_back(rounded(std::move(values), p.dtype));
  }
  return out;
}

std::optional<std::string> check_initial_values(const model::CaseSpec& spec,
                                                const ParamValues& values) {
  std::ostringstream err;
  if (values.size() != spec.params.size()) {
    err << "initial values for " << values.size() << " parameters, the case has "
        << spec.params.size();
    return err.str();
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const model::ParamSpec& p = spec.params[i];
    if (static_cast<int64_t>(values[i].size()) != p.numel()) {
      err << "parameter '" << p.name << "' has " << p.numel() << " elements, its initial values "
          << values[i].size();
      return err.str();
    }
    const std::vector<float> back = rounded(values[i], p.dtype);
    if (std::memcmp(back.data(), values[i].data(), back.size() * sizeof(float)) != 0) {
      err << "an initial value of parameter '" << p.name << "' is not representable in "
          << model::dtype_name(p.dtype);
      return err.str();
    }
  }
  return std::nullopt;
}

}  // namespace sc::rig
