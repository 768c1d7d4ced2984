#include "model/spec.h"

#include <algorithm>
#include <sstream>

namespace sc::model {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

DType grad_buffer_dtype(const CaseSpec& spec, const ParamSpec& param) {
  return spec.grad_reduce_in_fp32 ? DType::kFloat32 : param.dtype;
}

std::optional<int64_t> chunk_bucket_size(const CaseSpec& spec, int chunk) {
  if (spec.bucket_first_chunk_only && chunk > 0) return std::nullopt;
  return spec.bucket_size;
}

int CaseSpec::num_groups() const {
  int n = 0;
  for (const auto& p : params) n = std::max(n, p.group + 1);
  return n;
}

std::optional<std::string> validate(const CaseSpec& spec) {
  std::ostringstream err;
  if (spec.dp < 1) {
    err << "data-parallel size must be at least 1, got " << spec.dp;
  } else if (spec.expert_dp < 1) {
    err << "expert data-parallel size must be at least 1, got " << spec.expert_dp;
  } else if (spec.bucket_size && *spec.bucket_size < 1) {
    err << "bucket size must be positive, got " << *spec.bucket_size;
  } else if (!(spec.offload_fraction >= 0.0 && spec.offload_fraction <= 1.0)) {
    err << "offload fraction must lie in [0, 1], got " << spec.offload_fraction;
  } else if (spec.precision_aware && !spec.transformer_engine) {
    err << "the precision-aware optimizer needs Transformer Engine's FusedAdam";
  } else {
    for (const auto& p : spec.params) {
      for (int64_t d : p.shape) {
        if (d < 0) err << "parameter '" << p.name << "' has a negative dimension " << d;
      }
      if (err.tellp() == 0 && p.numel() == 0) {
        err << "parameter '" << p.name << "' has zero elements";
      }
      if (err.tellp() == 0 && p.group < 0) {
        err << "parameter '" << p.name << "' has a negative group index " << p.group;
      }
      if (err.tellp() == 0 && p.chunk < 0) {
        err << "parameter '" << p.name << "' has a negative model chunk " << p.chunk;
      }
      if (err.tellp() != 0) break;
    }
  }
  if (err.tellp() == 0) return std::nullopt;
  return err.str();
}

}  // namespace sc::model
