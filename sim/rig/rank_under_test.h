// The system-under-test seam: what the properties build, drive and observe one rank through,
// in the model's vocabulary. Two systems implement it: the port (sim/rig/rank_rig.h, RankRig)
// and real Megatron-Core code run by a worker process (sim/rig/megatron_rank.h). build_rank()
// picks one by target.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/grad_scaler.h"
#include "model/reference.h"
#include "model/shard.h"
#include "model/spec.h"
#include "model/streams.h"
#include "sim/rig/capabilities.h"
#include "sim/port/behaviour.h"
#include "sim/port/torch_pch.h"
#include "sim/rig/initial_values.h"
#include "sim/rig/megatron_worker.h"

namespace sc::rig {

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
  // The hybrid optimizer's `overlap_cpu_optimizer_min_numel`, where it has one (proposal S1's
  // grouping of host sub-optimizers; model/offload_plan.h): the port and upstream have none.
  std::optional<int64_t> host_min_numel;
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

// One parameter after a backward pass in the training loop (RankUnderTest::backward).
struct ObservedGrad {
  int param = -1;  // the case parameter
  bool requires_grad = false;
  bool is_leaf = false;
  bool grad_is_none = false;      // DDP's hook moved `.grad` into main_grad and dropped it
  std::vector<float> main_grad;   // the whole parameter's main_grad, as fp32 values
};

// Whether the rig records its streams (model/streams.h: races found, orders chosen by `policy`
// and `seed`) or runs everything at once in program order. Recording costs time and memory
// quadratic in the operations, so the main job leaves it off and the stream properties turn it on.
struct StreamSchedule {
  model::streams::Policy policy = model::streams::Policy::kEager;
  uint64_t seed = 0;
  bool simulate = false;
};


struct CheckpointImpl;
struct RealCheckpoint;

// What a checkpoint of one rank holds: model weights, the distributed optimizer's fp32 main
// params, and the hybrid optimizer's state_dict. Opaque; made by RankRig::save (`impl`) or, for
// real Megatron code, held by its worker (`real`).
struct Checkpoint {
  std::shared_ptr<const CheckpointImpl> impl;
  std::shared_ptr<const RealCheckpoint> real;
};

// Megatron's checkpoint formats that gather a DP group's optimizer state into world tensors on
// DP rank 0: "dp_zero_gather_scatter" (the world tensors themselves, scattered back on load) and
// "fully_reshardable" (cut into whole-param model-space tensors, which any DP size can load).
enum class GatheredFormat { kDpZero, kFullyReshardable };
// Megatron's name of `format`.
const char* format_name(GatheredFormat format);

struct GatheredCheckpointImpl;

// A checkpoint of one DP group in a gathered format: model weights, the optimizer's param
// groups and the param state. Opaque; made by RankRig::save_gathered.
struct GatheredCheckpoint {
  std::shared_ptr<const GatheredCheckpointImpl> impl;
};

// What the last step returned (`MixedPrecisionOptimizer.step`'s three values): success, and
// the grad norm and zero count, nullopt when inf/NaN skipped the step, 0 where clipping or
// counting is off.
struct StepReport {
  bool success = false;
  std::optional<double> grad_norm;
  std::optional<int64_t> num_zeros_in_grad;
};

// One rank of one instance of a case, built by a system under test and kept alive for stepping.
class RankUnderTest {
 public:
  virtual ~RankUnderTest() = default;

  // What construction built (or the error it raised).
  virtual const RankObservation& construction() const = 0;
  // Initial values of every parameter of the case, as the system holds them (16-bit values are
  // exactly representable); parameters of the other instance too, from the same seed.
  virtual const std::vector<std::vector<float>>& initial_values() const = 0;
  // One DistributedOptimizer step with these DP-reduced grads and group hyper-parameters.
  // Requires successful construction. In the training loop (Target::training_loop) the main
  // grads are what the backward passes left there, and `in.grads` (the same values) only tell the
  // simulated DP ranks' found-inf flags and grad stats.
  virtual void step(const model::StepInputs& in) = 0;
  // Training loop only (Target::training_loop): one forward and backward pass whose loss,
  // sum over this instance's parameters that require grad of (param * G).sum(), gives each the
  // case gradient `grads[case index]` (representable in its dtype) through autograd and DDP's
  // backward post-hook into main_grad (model/training.h). No grad reduce-scatter runs: every DP
  // rank's backward gives the same gradient, taken as the reduced one. What each parameter of
  // this instance then holds, in case order. Does not need successful construction.
  virtual std::vector<ObservedGrad> backward(const std::vector<std::vector<float>>& grads) = 0;
  // Gives the distributed optimizer a loss scaler, as Megatron's factory does for fp16 or
  // `--loss-scale`: from then on each step unscales the main grads, checks them for inf/NaN
  // (reduced over the DP group, whose other ranks hold the same reduced grads) and skips the rest
  // of the step when it finds one. `step`'s grads are then the scaled ones.
  virtual void use_grad_scaler(const model::GradScalerConfig& config) = 0;
  // The scaler's state after the last step (nullopt without a scaler).
  virtual std::optional<model::GradScalerState> grad_scaler_state() const = 0;
  // Sets the optimizer config's `clip_grad` (> 0: each step clips the main grads by their global
  // norm) and `log_num_zeros_in_grad`. The grad-stats group's other ranks (the instance's other
  // DP ranks, which hold the same reduced grads) are simulated.
  virtual void use_grad_stats(double clip_grad, bool log_num_zeros_in_grad) = 0;
  // What the last step returned.
  virtual StepReport last_step() const = 0;
  // Overwrites every parameter of this instance with `values` (per parameter, in case order), as
  // loading model weights does.
  virtual void set_model_values(const std::vector<std::vector<float>>& values) = 0;
  // DistributedOptimizer.zero_grad(set_to_none). In the training loop, first each model chunk's
  // DDP zero_grad_buffer(), as Megatron's train step starts.
  virtual void zero_grad(bool set_to_none) = 0;
  // DistributedOptimizer.reload_model_params().
  virtual void reload_model_params() = 0;
  // The model parameter's values over the piece of installed entry (g, i).
  virtual std::vector<float> model_piece(size_t g, size_t i) const = 0;
  // The tensor the optimizer steps for entry (g, i) (master), as fp32 values.
  virtual std::vector<float> optimizer_piece(size_t g, size_t i) const = 0;
  // The optimizer state of entry (g, i).
  virtual ObservedState state(size_t g, size_t i) const = 0;
  // Placement of entry (g, i) (HybridDeviceOptimizer only; default otherwise).
  virtual ObservedPlacement placement(size_t g, size_t i) const = 0;
  // Number of host sub-optimizers and whether there is an accelerator one (HDO only).
  virtual int num_cpu_optimizers() const = 0;
  virtual bool has_accelerator_optimizer() const = 0;
  // lr, betas, eps and weight decay of every optimizer group, in group order.
  virtual std::vector<model::AdamWHyper> group_hyper_parameters() const = 0;
  // FNV-1a digest of every owned piece of the model params, the optimizer's params and their
  // state (exp_avg, exp_avg_sq, step): equal digests mean bit-identical final states.
  virtual uint64_t digest() const = 0;
  // Every parameter of this instance, full, as fp32 values (per parameter, in case order).
  virtual std::vector<std::vector<float>> model_values() const = 0;

  // A checkpoint of the model weights, main params and optimizer state (hybrid optimizer only).
  virtual Checkpoint save() const = 0;
  // Loads `ck` into this freshly built rank of the same case: model weights, the fp32 main
  // params, then `hdo.load_state_dict` with its hooks (hybrid optimizer only). `map_to_host`:
  // the state dict is read with torch.load(map_location="cpu"), every tensor on the host.
  virtual void load(const Checkpoint& ck, bool map_to_host = false) = 0;
  // This rank's part of a distributed checkpoint of its DP group: the model's and the optimizer's
  // sharded state dicts as dist_checkpointing saves them, added to `group_so_far` (what the
  // group's ranks before this one saved) or, when null, starting one. What Megatron raises while
  // saving is kept and raised again by load_distributed. Any inner optimizer. See
  // rig::save_distributed for a whole group.
  virtual Checkpoint save_distributed(const Checkpoint* group_so_far) const = 0;
  // Resumes this freshly built rank of the same case from `ck` (save_distributed) the way
  // Megatron's load_checkpoint does: `sharded_state_dict(is_loading=True)`, the linked tensors
  // filled in place, `load_state_dict`. The port follows the sharding type first read,
  // "fully_sharded_model_space"; the real code saves and loads "dp_reshardable", Megatron's
  // default (sim/megatron/dist_checkpoint.py).
  virtual void load_distributed(const Checkpoint& ck) = 0;
  // Loads a gathered checkpoint (save_gathered) the way the distributed checkpoint does for its
  // format.
  virtual void load_gathered(const GatheredCheckpoint& ck) = 0;
  // Puts non-tensor entries named `keys` (say `found_inf: bool`) in the inner optimizer's
  // per-param state, as Megatron's own test of PR #3537 does (MEG-07).
  virtual void add_non_tensor_state(std::vector<std::string> keys) = 0;

  // Every race found so far (both operations, their streams, the region): by the port's stream
  // simulation, or for the real code by the worker's stream-order checker (built with
  // schedule.simulate on the host stand-in); empty where real streams run.
  virtual std::vector<std::string> stream_races() const = 0;
  // Every non-blocking copy the stream simulation saw run from pageable host memory.
  virtual std::vector<std::string> pageable_copies() const = 0;
};

// What a rank is built of: the port under `behaviour` on `device`, or, when `megatron` names a
// tree, Megatron's own code from that tree (on CUDA when `device` is).
// With `training_loop`, the rank's model chunks are wrapped as training wraps them (for the real
// code Megatron's own DistributedDataParallel over a torch.nn.Module holding the parameters; for
// the port its DDP's grad hooks) and gradients arrive through RankUnderTest::backward.
struct Target {
  sut::Behaviour behaviour;
  torch::Device device = torch::Device(torch::kCPU);
  std::optional<MegatronTarget> megatron;
  bool training_loop = false;
};

// Builds `rank` of `instance` of case `spec` on `target`, values from `seed`; construction errors
// are recorded in construction(), not thrown.
std::unique_ptr<RankUnderTest> build_rank(const Target& target, const model::CaseSpec& spec,
                                          model::Instance instance, int64_t rank, uint64_t seed,
                                          const StreamSchedule& schedule = StreamSchedule{});
// The same from given initial values, one vector per case parameter, each value representable
// in its dtype (std::invalid_argument otherwise). With schedule.simulate the port simulates its
// streams under the schedule's policy; the real code runs under the worker's stream-order checker
// instead (the policy unused; on CUDA, NotRunAgainstRealCode).
std::unique_ptr<RankUnderTest> build_rank(const Target& target, const model::CaseSpec& spec,
                                          model::Instance instance, int64_t rank,
                                          const ParamValues& initial,
                                          const StreamSchedule& schedule = StreamSchedule{});

// The weight decay every system under test builds case group `group` with: even groups decay
// (0.1), odd groups (the "no-decay" ones) do not.
double group_weight_decay(int group);

// FNV-1a digest of every owned piece of `rank`'s model params, the optimizer's params and their
// state (exp_avg, exp_avg_sq, step): equal digests mean bit-identical final states.
uint64_t state_digest(const RankUnderTest& rank);

// A distributed checkpoint of the DP group `group` (group[r] is DP rank r of one instance of one
// case, every rank constructed, all of one target): what DP rank r loads is the r-th.
std::vector<Checkpoint> save_distributed(const std::vector<const RankUnderTest*>& group);

// Saves the DP group `group` (group[r] is DP rank r of one instance of one case, every rank
// constructed, all of one target) in `format`. What Megatron raises while saving is kept and
// raised again by load_gathered.
GatheredCheckpoint save_gathered(const std::vector<const RankUnderTest*>& group,
                                 GatheredFormat format);

}  // namespace sc::rig
