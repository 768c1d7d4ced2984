// Port of Megatron-Core's DistributedOptimizer construction (distrib_optimizer.py at d8b71082):
// the range maps, the optimizer group ranges, `_build_model_and_main_param_groups` with its three
// branches, the index-map rebuild and the hand-over to the inner optimizer.
//
// The constructor throws what Megatron raises: TypeErrorLike for an unsupported parameter type,
// c10::Error("can't optimize a non-leaf Tensor") from the HybridDeviceOptimizer rebuild. A probe,
// if given, sees the fully built shard groups right before the hand-over.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sim/port/behaviour.h"
#include "sim/port/clip_grads.h"
#include "sim/port/grad_scaler.h"
#include "sim/port/param_buffer.h"
#include "sim/port/streams.h"
#include "sim/port/tensor_attrs.h"
#include "sim/port/torch_pch.h"

namespace sc::sut {

// Python's TypeError, raised by the shard builder for unsupported parameter types.
struct TypeErrorLike : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `Range` of distrib_optimizer.py.
struct Range {
  int64_t start = 0;
  int64_t end = 0;
  int64_t size() const { return end - start; }
  Range normalize(int64_t start) const { return Range{start, start + size()}; }
};

// The four ranges of one param on one rank.
struct ParamRangeMap {
  Range gbuf_world, gbuf_world_in_bucket, gbuf_local, param;
};

// One bucket's `{"param_map": ...}`, param_map in insertion order (model param index first).
struct BucketRangeMap {
  Range gbuf_world;  // this rank's world range (computed there, kept for observation)
  std::vector<std::pair<int, ParamRangeMap>> param_map;
};

// `{(param_dtype, grad_dtype): [bucket maps]}` of one buffer.
struct GbufRangeMap {
  torch::ScalarType param_dtype;
  torch::ScalarType grad_dtype;
  std::vector<BucketRangeMap> buckets;
};

// `OptimizerConfig` fields the constructor reads.
struct OptimizerConfig {
  bool use_precision_aware_optimizer_no_fp8_or_ds_fp8 = false;
  bool store_param_remainders = true;
  bool bf16 = false;  // the run's --bf16 (placeholder master_param dtype in load_state_dict)
  double clip_grad = 0.0;              // > 0: each step clips by the global grad norm
  bool log_num_zeros_in_grad = false;  // each step counts the zeros of the main grads
};

// What `MixedPrecisionOptimizer.step` returns: (False, None, None) when inf/NaN skipped it, else
// (success, grad_norm, num_zeros_in_grad) with 0.0 and 0 where clipping or counting is off.
struct StepResult {
  bool success = false;
  std::optional<double> grad_norm;
  std::optional<int64_t> num_zeros_in_grad;
};

// The values of Megatron's `param_group_identifier_keys` (wd_mult, lr_mult, is_expert_parallel,
// is_decoupled_lr) of one optimizer group: what load_state_dict matches saved groups by.
struct GroupKey {
  double wd_mult = 1.0;
  double lr_mult = 1.0;
  bool is_expert_parallel = false;
  bool is_decoupled_lr = false;
  bool operator<(const GroupKey& other) const {
    return std::tie(wd_mult, lr_mult, is_expert_parallel, is_decoupled_lr) <
           std::tie(other.wd_mult, other.lr_mult, other.is_expert_parallel, other.is_decoupled_lr);
  }
};

// One entry of `state_dict()["optimizer"]["param_groups"]` (its params removed).
struct SavedGroup {
  GroupKey key;
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  std::optional<int64_t> step;  // absent where Megatron writes none
};

// `_get_main_param_and_optimizer_states(model_param)`: "param" and the optimizer's tensor-valued
// state by name. torch AdamW's `step` (a tensor in Python) is a 0-d float tensor here. Only the
// MEG-07 mutant puts a non-tensor entry in it, as an undefined tensor: no tensor operation
// applies to it, as none does to a Python bool.
using ParamStateTensors = std::map<std::string, torch::Tensor>;

// `get_parameter_state_dp_reshardable()`: per buffer, per bucket, per param of the bucket's
// param_map, its tensors (the live ones, not copies).
using DpReshardableState = std::vector<std::vector<std::vector<ParamStateTensors>>>;

// `get_parameter_state_dp_zero()` of one buffer: the DP group's "param", "exp_avg" and
// "exp_avg_sq" as fp32 CPU world tensors of the buffer's `numel_unpadded` elements, bucket after
// bucket with each bucket's end padding stripped (the padding between params inside a bucket
// stays), and that element count.
struct DpZeroBufferState {
  std::map<std::string, torch::Tensor> tensors;
  int64_t numel_unpadded = 0;
};
using DpZeroState = std::vector<DpZeroBufferState>;

// One rank's contribution to get_parameter_state_dp_zero(): per buffer, per bucket, the
// contiguous local shards (gbuf_local_numel elements each) of "param", "exp_avg", "exp_avg_sq".
using DpZeroLocalShards = std::vector<std::vector<std::map<std::string, torch::Tensor>>>;

// One entry of `sharded_param_state_fully_reshardable()`: a model param (index into the
// constructor's `model_params`) and its whole state in model space ("param", "exp_avg",
// "exp_avg_sq", each of the param's shape), cut from the world tensors.
struct ModelSpaceParamState {
  int param = -1;
  ParamStateTensors tensors;
};

// The `param_state` that load_state_dict accepts, with its sharding type: "dp_reshardable"
// (per buffer, bucket and param), "fully_sharded_model_space" (the default of Megatron's
// distributed checkpoints: one entry per local param in buffer order, "param" named
// "fp32_param"), "dp_zero_gather_scatter" (the world tensors, read on DP rank 0 and scattered)
// or "fully_reshardable" (one model-space entry per param of every buffer, in param_index_map
// order, local or not).
struct ParamStateDict {
  enum class Sharding { kDpReshardable, kFullyShardedModelSpace, kDpZero, kFullyReshardable };
  Sharding sharding = Sharding::kFullyShardedModelSpace;
  DpReshardableState dp_reshardable;
  std::vector<ParamStateTensors> fs_model_space;
  DpZeroState dp_zero;
  std::vector<ParamStateTensors> fully_reshardable;
};

// `DistributedOptimizer.state_dict()`, plus the `param_state` load_state_dict accepts.
struct DistOptStateDict {
  std::vector<SavedGroup> param_groups;
  std::optional<ParamStateDict> param_state;
};

// A group range: local params (model indices) of one inner-optimizer group.
struct GroupRange {
  std::vector<int> params;
  int orig_group;  // index into the inner optimizer's param_groups()
};

class DistributedOptimizer {
 public:
  using Probe = std::function<void(const DistributedOptimizer&)>;

  // `inner` holds the model params (tensors of `model_params`) in its groups; `buffers` are this
  // rank's buffers of the params that `inner` optimizes.
  DistributedOptimizer(std::unique_ptr<torch::optim::Optimizer> inner, const OptimizerConfig& config,
                       std::vector<ModelParam>& model_params,
                       std::vector<const ParamAndGradBuffer*> buffers, const Behaviour& behaviour,
                       torch::Device accelerator, TensorAttrs* attrs,
                       const Probe& before_hand_over = nullptr, Streams* streams = nullptr);

  // `MixedPrecisionOptimizer.step`: model grads to main grads; with a grad scaler, the main
  // grads unscaled and checked for inf/NaN (the flag MAX-reduced over the grad-stats group), the
  // scaler updated and, on inf/NaN, nothing more; else clipping by the global grad norm
  // (`clip_grad` > 0), the zero count (`log_num_zeros_in_grad`), the inner optimizer's step and
  // main params to model params.
  StepResult step();
  // `clip_grad` and `log_num_zeros_in_grad` of the config, and the SUM all-reduce over the
  // grad-stats group that the norm and the zero count use (the rig simulates the other ranks).
  void set_grad_stats(double clip_grad, bool log_num_zeros_in_grad, GradStatsSum sum);
  // `get_main_grads_for_grad_norm`: the grad (`.decoupled_grad` when precision-aware) of every
  // parameter of the inner optimizer's groups that has one. Megatron also drops parameters marked
  // `shared` and tensor-parallel duplicates; the port's worlds have neither (no `shared`
  // attribute, tensor-parallel size 1).
  std::vector<torch::Tensor> main_grads_for_grad_norm() const;
  // `clip_grad_norm(clip_grad)`: the global norm, and the grads clipped by it; returns the norm.
  double clip_grad_norm(double clip_grad);
  // `count_zeros()`.
  int64_t count_zeros() const;
  // The `grad_scaler` constructor argument (Megatron's factory gives one for fp16 or
  // `--loss-scale`), and the MAX all-reduce of the found-inf flag over the grad-stats group
  // (`reduce_max(local)` returns the group's flag; the rig simulates the other ranks).
  void set_grad_scaler(std::unique_ptr<GradScaler> scaler, std::function<bool(bool)> reduce_max);
  const GradScaler* grad_scaler() const { return grad_scaler_.get(); }
  // `_copy_model_grads_to_main_grads`: `.grad` (cast to fp32) or, precision-aware,
  // `.decoupled_grad` (no cast) of every shard, from the model param's `main_grad`.
  void copy_model_grads_to_main_grads();
  // `_copy_main_params_to_model_params` (a no-op when precision-aware).
  void copy_main_params_to_model_params();
  // `reload_model_params` / `_copy_model_params_to_main_params`: with a hybrid optimizer its
  // `update_fp32_param_by_new_param()` only; precision-aware: nothing; else each main param
  // takes the model param's piece.
  void reload_model_params();
  // `zero_grad(set_to_none)`: `.grad` (or `.decoupled_grad` when precision-aware) of the model
  // and shard groups; the inner optimizer's own zero_grad is not called.
  void zero_grad(bool set_to_none);
  // The four ranges of model param `param` on this rank.
  const ParamRangeMap& ranges_of(int param) const;

  // Identifier keys of the inner optimizer's groups, by group index (Megatron keeps them in the
  // group dicts; LibTorch's group options have no room for them).
  void set_group_keys(std::vector<GroupKey> keys) { group_keys_ = std::move(keys); }
  // `state_dict()`: the inner optimizer's groups without params, with `step` written the way
  // Megatron extracts it (torch AdamW: the one step of all state entries; HybridDeviceOptimizer:
  // that of the first host AdamW with state; TE FusedAdam: the groups' step).
  DistOptStateDict state_dict() const;
  // lr, betas, eps and weight decay of every inner-optimizer group, as the next step would use
  // them (no key, no step).
  std::vector<SavedGroup> group_hyper_parameters() const;
  // `load_state_dict()`: a hybrid optimizer without state first takes a dummy step; saved groups
  // are matched by identifier keys; an optimizer without state gets placeholder state; `step`
  // goes where Megatron puts it; then the inner optimizer loads, and `param_state`, if any, is
  // loaded with load_parameter_state_from_dp_reshardable.
  void load_state_dict(const DistOptStateDict& sd, uint64_t dummy_step_seed = 0);
  // `get_parameter_state_dp_reshardable()`.
  DpReshardableState get_parameter_state_dp_reshardable() const;
  // `load_parameter_state_from_dp_reshardable()`: `_set_main_param_and_optimizer_states` for
  // every param (no hybrid-optimizer state sync follows, as upstream).
  void load_parameter_state_from_dp_reshardable(const DpReshardableState& state);
  // The tensors `sharded_param_state_fs_model_space()` links to the checkpoint, per local param
  // in buffer order (live; "step" kept as a plain entry).
  std::vector<ParamStateTensors> param_state_fs_model_space() const;
  // `load_parameter_state_from_fs_model_space()`: "step" skipped, "fp32_param" as "param",
  // `_set_main_param_and_optimizer_states` per param, then the hybrid optimizer's state sync.
  void load_parameter_state_from_fs_model_space(const std::vector<ParamStateTensors>& state);
  // The first half of `get_parameter_state_dp_zero()` on this rank: every local param's
  // "param", "exp_avg" and "exp_avg_sq" copied (as fp32, on the CPU) into contiguous per-bucket
  // shards at its gbuf_local range. Raises KeyError where the state lacks one of them.
  DpZeroLocalShards dp_zero_local_shards() const;
  // `sharded_param_state_fully_reshardable()` given the DP group's world tensors: for every
  // param of every buffer in param_index_map order, its model-space state sliced from the world
  // tensors at the param's buffer range. Upstream slices at the raw range, which still counts
  // the end padding of earlier buckets (PR #5077 subtracts it: `Deviation::kF7`);
  // a slice cut short by the end of the world tensors is padded with zeros, as upstream warns.
  std::vector<ModelSpaceParamState> sharded_param_state_fully_reshardable(
      const DpZeroState& world) const;
  // `load_parameter_state_from_fully_reshardable()`: entry k of `state` belongs to the k-th
  // param in param_index_map order; every local param takes its piece, then the hybrid
  // optimizer's state sync.
  void load_parameter_state_from_fully_reshardable(const std::vector<ParamStateTensors>& state);
  // `load_parameter_state_from_dp_zero()`: this rank's part of DP rank 0's scatter of `world`
  // (each bucket's unpadded stretch, padded back at its end, cut into DP shards), then
  // `_set_main_param_and_optimizer_states` per local param; no hybrid-optimizer state sync
  // follows, as upstream.
  void load_parameter_state_from_dp_zero(const DpZeroState& world);
  // Non-tensor entries named `keys` (say `found_inf: bool`) join the inner optimizer's state of
  // every param that has state, as optimizers that keep per-param flags have them. Upstream's
  // save and load skip such entries (PR #3537); no ported optimizer reads them, so only their
  // names are kept.
  void add_non_tensor_state(std::vector<std::string> keys) { non_tensor_state_ = std::move(keys); }
  // This rank's buffers, in the order the range maps walk them.
  const std::vector<const ParamAndGradBuffer*>& buffers() const { return buffers_; }

  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  const torch::optim::Optimizer& optimizer() const { return *optimizer_; }
  const std::vector<GbufRangeMap>& gbuf_ranges() const { return gbuf_ranges_; }
  const std::vector<GroupRange>& opt_group_ranges() const { return opt_group_ranges_; }
  // param -> (group index, position) after the rebuild in __init__.
  const std::vector<std::pair<int, std::pair<int, int>>>& model_param_group_index_map() const {
    return model_param_group_index_map_;
  }
  // The five per-group lists of `_build_model_and_main_param_groups` (None = undefined tensor).
  const std::vector<std::vector<int>>& model_float16_groups() const { return model_float16_groups_; }
  const std::vector<std::vector<int>>& model_fp32_groups() const { return model_fp32_groups_; }
  const std::vector<std::vector<torch::Tensor>>& shard_float16_groups() const {
    return shard_float16_groups_;
  }
  const std::vector<std::vector<torch::Tensor>>& shard_fp32_groups() const {
    return shard_fp32_groups_;
  }
  const std::vector<std::vector<torch::Tensor>>& shard_fp32_from_float16_groups() const {
    return shard_fp32_from_float16_groups_;
  }
  // The tensors installed in inner group g, in installed order.
  const std::vector<torch::Tensor>& installed(size_t g) const { return installed_[g]; }

 private:
  void build_model_and_main_param_groups();
  ParamStateTensors get_main_param_and_optimizer_states(int param) const;
  void set_main_param_and_optimizer_states(int param, const ParamStateTensors& tensors);
  // The tensor installed for `param` in the inner optimizer (group index map).
  torch::Tensor installed_tensor(int param) const;

  OptimizerConfig config_;
  Behaviour behaviour_;
  torch::Device accelerator_;
  std::vector<ModelParam>& model_params_;
  std::vector<const ParamAndGradBuffer*> buffers_;
  TensorAttrs* attrs_;
  std::unique_ptr<GradScaler> grad_scaler_;
  std::function<bool(bool)> found_inf_reduce_max_;
  GradStatsSum grad_stats_sum_;
  // `_unscale_main_grads_and_check_for_nan`.
  bool unscale_main_grads_and_check_for_nan();
  std::unique_ptr<Streams> own_streams_;
  Streams* streams_;  // the copies of the step run on its current stream
  std::map<int, std::pair<int, int>> param_gbuf_map_;  // param -> (gbuf index, bucket index)
  std::vector<std::string> non_tensor_state_;  // see add_non_tensor_state
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<GbufRangeMap> gbuf_ranges_;
  std::vector<GroupRange> opt_group_ranges_;
  std::vector<std::pair<int, std::pair<int, int>>> model_param_group_index_map_;
  std::vector<std::vector<int>> model_float16_groups_, model_fp32_groups_;
  std::vector<std::vector<torch::Tensor>> shard_float16_groups_, shard_fp32_groups_,
      shard_fp32_from_float16_groups_;
  std::vector<std::vector<torch::Tensor>> installed_;
  std::vector<GroupKey> group_keys_;
};

// The second half of `get_parameter_state_dp_zero()`: gathers the local shards of a DP group
// (`group[r]` is DP rank r, all built from the same buffers' layouts) on DP rank 0 and packs
// each bucket's unpadded stretch into the world tensors.
DpZeroState gather_parameter_state_dp_zero(const std::vector<const DistributedOptimizer*>& group);

}  // namespace sc::sut
