// Port of Megatron's `_ParamAndGradBuffer` and of the layout it consumes (param_layout.py,
// `group_params_for_buffers`, `DistributedOptimizer._compute_per_buffer_param_layout`).
//
// After construction every model parameter of the buffer is still the same leaf tensor that
// requires grad, but its storage is a view of `param_data` at its layout offset, and its
// `main_grad` is the matching view of `grad_data`, exactly as Megatron rebinds `param.data`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "sim/port/torch_pch.h"

namespace sc::sut {

// A model parameter with the Python attributes the optimizer code reads.
struct ModelParam {
  std::string name;
  torch::Tensor param;            // leaf, requires_grad
  bool shared_embedding = false;  // `param.shared_embedding`
  bool allreduce = true;          // `param.allreduce`; False for expert parameters
  torch::Tensor main_grad;        // set by the buffer
  // `param.grad_added_to_main_grad`: set by DDP (false), read by its backward post-hook.
  bool grad_added_to_main_grad = false;
  torch::Tensor main_param;       // set by DistributedOptimizer for 16-bit params (may be None)
  bool main_param_sharded = false;
};

// The DDP switches the layout reads.
struct DdpConfig {
  bool use_distributed_optimizer = true;
  bool grad_reduce_in_fp32 = false;
  bool pad_buckets_for_high_nccl_busbw = false;
  std::optional<int64_t> bucket_size;
  // Layout rules as Megatron has them; other values are set only by the rule mutants.
  int64_t param_alignment = 64;
  bool bucket_pad_product = false;  // dp * 128 instead of lcm(dp, 128)
  bool forward_order = false;       // list order instead of reversed
};

// `BufferKey` of param_layout.py.
struct BufferKey {
  torch::ScalarType param_dtype;
  torch::ScalarType grad_dtype;
  bool is_expert_parallel;
};

// `PerBufferParamLayout`: param -> (start, end, bucket id) in insertion (layout) order.
struct PerBufferParamLayout {
  std::vector<std::tuple<int, int64_t, int64_t, int>> param_index_map;
  std::vector<std::pair<int64_t, int64_t>> bucket_indices;
  std::vector<int64_t> per_bucket_numel_unpadded;
};

// `group_params_for_buffers` over the params of one model chunk (`chunk_params`, indices into
// `params` in named_parameters() order): (key, indices) in order of first appearance.
std::vector<std::pair<BufferKey, std::vector<int>>> group_params_for_buffers(
    const std::vector<ModelParam>& params, const std::vector<int>& chunk_params,
    bool grad_reduce_in_fp32);
// `DistributedOptimizer._compute_per_buffer_param_layout`.
PerBufferParamLayout compute_per_buffer_param_layout(const std::vector<ModelParam>& params,
                                                     const std::vector<int>& buffer_params,
                                                     std::optional<int64_t> bucket_size,
                                                     int64_t dp_size, const DdpConfig& ddp);
// `_compute_default_per_buffer_param_layout` (no distributed optimizer).
PerBufferParamLayout compute_default_per_buffer_param_layout(
    const std::vector<ModelParam>& params, const std::vector<int>& buffer_params,
    std::optional<int64_t> bucket_size);

// One bucket (`_ParamAndGradBucket`): views of the buffer.
struct Bucket {
  int64_t offset;
  int64_t numel_unpadded;
  torch::Tensor param_data;
  torch::Tensor grad_data;
  // `param_to_index`: each param of the bucket (index into `params`) -> its (start, end) in the
  // bucket, its buffer range less `offset`, in the bucket's param order.
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> param_to_index;
};

// `_ParamAndGradBuffer` of one DP rank.
class ParamAndGradBuffer {
 public:
  // Lays out `buffer_params` of `params`, allocates the buffers on `device` and rebinds each
  // parameter's storage into `param_data` (copying its values first).
  ParamAndGradBuffer(const DdpConfig& ddp, BufferKey key, std::vector<ModelParam>& params,
                     std::vector<int> buffer_params, int64_t dp_size, int64_t dp_rank,
                     torch::Device device);

  const BufferKey& key() const { return key_; }
  int64_t dp_size() const { return dp_size_; }
  int64_t dp_rank() const { return dp_rank_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const PerBufferParamLayout& layout() const { return layout_; }
  const torch::Tensor& param_data() const { return param_data_; }
  const torch::Tensor& grad_data() const { return grad_data_; }
  int64_t numel() const { return numel_; }
  // `numel_unpadded`: the sum of the buckets' unpadded element counts.
  int64_t numel_unpadded() const {
    int64_t n = 0;
    for (int64_t b : layout_.per_bucket_numel_unpadded) n += b;
    return n;
  }

 private:
  BufferKey key_;
  int64_t dp_size_;
  int64_t dp_rank_;
  PerBufferParamLayout layout_;
  int64_t numel_ = 0;
  torch::Tensor param_data_;
  torch::Tensor grad_data_;
  std::vector<Bucket> buckets_;
};

}  // namespace sc::sut
