// Drives the port for one rank of one distributed-optimizer instance of a model::CaseSpec and
// reports what it built, in the model's vocabulary, so that properties can compare the two.
//
// One function, run_rank(), creates the rank's parameters (values from the seed), its buffers,
// the inner optimizer (AdamW, or a HybridDeviceOptimizer when the case offloads) and the
// DistributedOptimizer, and records the construction outcome instead of throwing.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/reference.h"
#include "model/shard.h"
#include "model/spec.h"
#include "model/streams.h"
#include "sim/port/behaviour.h"
#include "sim/port/torch_pch.h"

namespace sc::sut {
class ParamAndGradBuffer;
}  // namespace sc::sut

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

// Where the hybrid optimizer put one installed tensor, read off the port.
struct ObservedPlacement {
  bool offloaded = false;
  bool fp32_copy = false;
  bool host_pinned = false;
  int cpu_optimizer = -1;
  // Whether the tensor its sub-optimizer steps lives on the host, and each tensor of
  // hdo.state for it ("exp_avg" -> on the host; empty before the first step).
  bool stepped_on_host = false;
  std::map<std::string, bool> state_on_host;
};

// The optimizer state the port holds for one installed tensor.
struct ObservedState {
  std::vector<float> exp_avg, exp_avg_sq, master;
  int64_t step = 0;
  bool present = false;
};

// Whether the rig records its streams (model/streams.h: races found, orders chosen by `policy`
// and `seed`) or runs everything at once in program order. Recording costs time and memory
// quadratic in the operations, so the main job leaves it off and the stream properties turn it on.
struct StreamSchedule {
  model::streams::Policy policy = model::streams::Policy::kEager;
  uint64_t seed = 0;
  bool simulate = false;
};

struct RankRigImpl;
struct CheckpointImpl;

// What a checkpoint of one rank holds: model weights, the distributed optimizer's fp32 main
// params, and the hybrid optimizer's state_dict. Opaque; made by RankRig::save.
struct Checkpoint {
  std::shared_ptr<const CheckpointImpl> impl;
};

// Megatron's checkpoint formats that gather a DP group's optimizer state into world tensors on
// DP rank 0: "dp_zero_gather_scatter" (the world tensors themselves, scattered back on load) and
// "fully_reshardable" (cut into whole-param model-space tensors, which any DP size can load).
enum class GatheredFormat { kDpZero, kFullyReshardable };
// Megatron's name of `f`.
const char* format_name(GatheredFormat f);

struct GatheredCheckpointImpl;

// A checkpoint of one DP group in a gathered format: model weights, the optimizer's param
// groups and the param state. Opaque; made by RankRig::save_gathered.
struct GatheredCheckpoint {
  std::shared_ptr<const GatheredCheckpointImpl> impl;
};

// One rank of one instance of a case, built by the port and kept alive for stepping.
class RankRig {
 public:
  RankRig(const model::CaseSpec& c, model::Instance instance, int64_t rank,
          const sut::Behaviour& behaviour, torch::Device device, uint64_t seed,
          const StreamSchedule& schedule = StreamSchedule{});
  // Every race the stream simulation found so far (both operations, their streams, the region);
  // empty on a CUDA device, where real streams run the port.
  std::vector<std::string> stream_races() const;
  // Every non-blocking copy the stream simulation saw run from pageable host memory (synchronous
  // for the host); empty on a CUDA device.
  std::vector<std::string> pageable_copies() const;
  ~RankRig();
  RankRig(const RankRig&) = delete;
  RankRig& operator=(const RankRig&) = delete;

  // What construction built (or the error it raised).
  const RankObservation& construction() const;
  // Initial values of every parameter of the case, as the port holds them (16-bit values are
  // exactly representable); parameters of the other instance too, from the same seed.
  const std::vector<std::vector<float>>& initial_values() const;
  // One DistributedOptimizer step with these DP-reduced grads and group hyper-parameters.
  // Requires successful construction.
  void step(const model::StepInputs& in);
  // Overwrites every parameter of this instance with `values` (per port parameter, in case
  // order), as loading model weights does.
  void set_model_values(const std::vector<std::vector<float>>& values);
  // DistributedOptimizer.zero_grad(set_to_none).
  void zero_grad(bool set_to_none);
  // DistributedOptimizer.reload_model_params().
  void reload_model_params();
  // The model parameter's values over the piece of installed entry (g, i).
  std::vector<float> model_piece(size_t g, size_t i) const;
  // The tensor the optimizer steps for entry (g, i) (master), as fp32 values.
  std::vector<float> optimizer_piece(size_t g, size_t i) const;
  // The optimizer state of entry (g, i).
  ObservedState state(size_t g, size_t i) const;
  // A checkpoint of the model weights, main params and optimizer state (hybrid optimizer only).
  Checkpoint save() const;
  // Loads `ck` into this freshly built rig of the same case: model weights first, then the
  // fp32 main params, then `hdo.load_state_dict` (with its hooks) directly (hybrid optimizer
  // only).
  // `map_to_host`: the state dict is read with torch.load(map_location="cpu"), every tensor
  // on the host; else each tensor where it was saved.
  void load(const Checkpoint& ck, bool map_to_host = false);
  // Loads `ck` the way Megatron's distributed checkpoint does with the default sharding type
  // ("fully_sharded_model_space"): DistributedOptimizer.sharded_state_dict(is_loading=True)
  // (load_state_dict(state_dict()), with the dummy step of an empty hybrid optimizer), the
  // checkpoint read in place into the model params and the optimizer tensors it links, then
  // DistributedOptimizer.load_state_dict with that param_state. Any inner optimizer.
  void load_distributed(const Checkpoint& ck);
  // lr, betas, eps and weight decay of every optimizer group, in group order.
  std::vector<model::AdamWHyper> group_hyper_parameters() const;
  // Puts non-tensor entries named `keys` (say `found_inf: bool`) in the inner optimizer's
  // per-param state, as Megatron's own test of PR #3537 does (MEG-07).
  void add_non_tensor_state(std::vector<std::string> keys);
  // Saves the DP group `group` (group[r] is DP rank r of one instance of one case, every rank
  // constructed) in `format`, through get_parameter_state_dp_zero and, for
  // "fully_reshardable", sharded_param_state_fully_reshardable. What Megatron raises while
  // saving is kept and raised again by load_gathered.
  static GatheredCheckpoint save_gathered(const std::vector<const RankRig*>& group,
                                          GatheredFormat format);
  // Loads `ck` into this freshly built rig the way the distributed checkpoint does for its
  // format: sharded_state_dict(is_loading=True), the model weights, then
  // DistributedOptimizer.load_state_dict with the param state keyed to this rank's params.
  void load_gathered(const GatheredCheckpoint& ck);
  // FNV-1a digest of every owned piece of the model params, the optimizer's params and their
  // state (exp_avg, exp_avg_sq, step): equal digests mean bit-identical final states.
  uint64_t digest() const;
  // Placement of entry (g, i) (HybridDeviceOptimizer only; default otherwise).
  ObservedPlacement placement(size_t g, size_t i) const;
  // Number of host sub-optimizers and whether there is an accelerator one (HDO only).
  int num_cpu_optimizers() const;
  bool has_accelerator_optimizer() const;

  // For the multi-process mode (sim/app/multiprocess.h), which runs the real collectives:
  // this rank's grad and param buffers, in the order the DistributedOptimizer walks them.
  std::vector<const sut::ParamAndGradBuffer*> buffers() const;
  // Writes `grads` (per case parameter; parameters of the other instance are skipped) into the
  // main grads, as the backward pass leaves them before the reduce-scatter.
  void write_main_grads(const std::vector<std::vector<float>>& grads);
  // step() with the grads the main grads hold now (after the caller's reduce-scatter) and the
  // group hyper-parameters of `in` (its grads are ignored). Requires successful construction.
  void step_with_main_grads(const model::StepInputs& in);
  // Every parameter of this instance, full, as fp32 values (per port parameter, in case order).
  std::vector<std::vector<float>> model_values() const;

 private:
  std::unique_ptr<RankRigImpl> impl_;
};

// Builds `rank` of `instance` of case `c` under `behaviour` on `device` and reports it.
RankObservation run_rank(const model::CaseSpec& c, model::Instance instance, int64_t rank,
                         const sut::Behaviour& behaviour, torch::Device device, uint64_t seed);

// model::DType of a LibTorch scalar type (fp64 for anything unsupported).
model::DType to_model_dtype(torch::ScalarType t);
// LibTorch scalar type of a model::DType.
torch::ScalarType to_torch_dtype(model::DType d);

}  // namespace sc::sim
