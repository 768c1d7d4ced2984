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
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sim/sut/behaviour.h"
#include "sim/sut/param_buffer.h"
#include "sim/sut/tensor_attrs.h"
#include "sim/sut/torch_fwd.h"

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
  Range normalize(int64_t s) const { return Range{s, s + size()}; }
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
                       const Probe& before_hand_over = nullptr);

  // `MixedPrecisionOptimizer.step` without grad scaler and clipping: model grads to main
  // grads, the inner optimizer's step, main params to model params.
  void step();
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

  OptimizerConfig config_;
  Behaviour behaviour_;
  torch::Device accelerator_;
  std::vector<ModelParam>& model_params_;
  std::vector<const ParamAndGradBuffer*> buffers_;
  TensorAttrs* attrs_;
  std::map<int, std::pair<int, int>> param_gbuf_map_;  // param -> (gbuf index, bucket index)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<GbufRangeMap> gbuf_ranges_;
  std::vector<GroupRange> opt_group_ranges_;
  std::vector<std::pair<int, std::pair<int, int>>> model_param_group_index_map_;
  std::vector<std::vector<int>> model_float16_groups_, model_fp32_groups_;
  std::vector<std::vector<torch::Tensor>> shard_float16_groups_, shard_fp32_groups_,
      shard_fp32_from_float16_groups_;
  std::vector<std::vector<torch::Tensor>> installed_;
};

}  // namespace sc::sut
