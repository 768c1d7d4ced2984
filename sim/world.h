// Drives the port for one rank of one distributed-optimizer instance of a model::CaseSpec and
// reports what it built, in the model's vocabulary, so that properties can compare the two.
//
// One function, run_rank(), creates the rank's parameters (values from the seed), its buffers,
// the inner optimizer (AdamW, or a HybridDeviceOptimizer when the case offloads) and the
// DistributedOptimizer, and records the construction outcome instead of throwing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/shard.h"
#include "model/spec.h"
#include "sim/sut/behaviour.h"
#include "sim/sut/torch_fwd.h"

namespace sc::sim {

// One tensor as installed in an optimizer group, observed on the real tensor.
struct ObservedTensor {
  int param = -1;               // the model parameter it was built from
  model::DType dtype = model::DType::kFloat32;
  int64_t numel = 0;
  bool is_leaf = false;
  bool requires_grad = false;
  bool has_grad_fn = false;
  bool aliases_model = false;   // shares the model parameter's storage
  int64_t alias_offset = -1;    // element offset into the model parameter, when aliasing
  bool model_has_main_param = false;  // the model param's main_param is this very tensor
};

// What the port built on one rank.
struct RankObservation {
  model::Instance instance = model::Instance::kDense;
  int64_t rank = 0;
  std::vector<model::BufferRanges> ranges;         // the port's gbuf ranges, filtered
  std::vector<std::vector<ObservedTensor>> groups; // installed groups, in group order
  std::map<int, std::pair<int, int>> index_map;    // model_param_group_index_map after rebuild
  std::optional<std::string> error;                // construction outcome: empty = OK
  std::string error_type;  // the Python exception class Megatron raises: ValueError, TypeError
  bool final_groups_match = true;  // on success: the optimizer holds exactly the installed tensors
  int64_t offloaded_tensors = 0;   // HDO only: installed tensors with a host copy
  int failing_param = -1;          // on a leaf-check failure: the first non-leaf's model param
  int64_t accel_bytes = 0;  // on success: param and grad buffers, fp32 main and fp32 copies
  int64_t host_bytes = 0;   // on success: the HDO's host copies
};

// Runs the port for `rank` of `instance` of case `c` under `behaviour` on `device`.
RankObservation run_rank(const model::CaseSpec& c, model::Instance instance, int64_t rank,
                         const sut::Behaviour& behaviour, torch::Device device, uint64_t seed);

// model::DType of a LibTorch scalar type (fp64 for anything unsupported).
model::DType to_model_dtype(torch::ScalarType t);
// LibTorch scalar type of a model::DType.
torch::ScalarType to_torch_dtype(model::DType d);

}  // namespace sc::sim
