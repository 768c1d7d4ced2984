// Megatron's parameter-and-gradient buffer layout (param_layout.py, distrib_optimizer.py
// `_compute_per_buffer_param_layout`, param_and_grad_buffer.py `group_params_for_buffers` and
// `_compute_default_per_buffer_param_layout`).
//
// Invariants of a distributed-optimizer layout: parameters are placed in reverse list order;
// every parameter start is a multiple of 64 elements; every bucket start and end is a multiple
// of bucket_end_divisor(dp); a shared-embedding parameter sits alone in its bucket. The default
// (non-distributed) layout has none of the padding rules.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/dtype.h"
#include "model/range.h"
#include "model/spec.h"

namespace sc::model {

// Elements a parameter start is aligned to (`pad_param_start`).
inline constexpr int64_t kParamAlignment = 64;
// The fixed factor of the bucket-end divisor.
inline constexpr int64_t kBucketEndFactor = 128;
// The extra factor with `pad_buckets_for_high_nccl_busbw`.
inline constexpr int64_t kHighBusbwFactor = int64_t{1} << 16;

// ceil(value / divisor) * divisor (`pad_to_divisor`); divisor > 0.
int64_t pad_to_divisor(int64_t value, int64_t divisor);
// value rounded up to a multiple of 64 (`pad_param_start`).
int64_t pad_param_start(int64_t value);
// lcm(dp, 128), or lcm(dp, 128, 2^16) with `high_busbw` (`bucket_end_divisor`).
int64_t bucket_end_divisor(int64_t dp, bool high_busbw);

// Identifies one buffer (`BufferKey`): parameters with equal keys share a buffer.
struct BufferKey {
  DType param_dtype;
  DType grad_dtype;
  bool is_expert;
  friend bool operator==(const BufferKey& a, const BufferKey& b) {
    return a.param_dtype == b.param_dtype && a.grad_dtype == b.grad_dtype &&
           a.is_expert == b.is_expert;
  }
};

// The parameters of one buffer, as indices into CaseSpec::params in list order.
struct BufferParams {
  BufferKey key;
  int chunk = 0;  // model chunk: every chunk has its own buffers
  std::vector<int> params;
};

// `group_params_for_buffers` per model chunk: chunks ascending (the distributed optimizer chains
// the chunks' buffers in that order), and within a chunk the order of first appearance of a key.
std::vector<BufferParams> group_params_for_buffers(const CaseSpec& spec);

// Where one parameter sits in its buffer.
struct ParamPlacement {
  int param;    // index into CaseSpec::params
  Range range;  // absolute element range in the buffer
  int bucket;   // bucket id
};

// `PerBufferParamLayout` of one buffer.
struct BufferLayout {
  BufferKey key;
  int chunk = 0;
  int64_t dp = 1;                              // DP size the buffer is sharded over
  std::vector<ParamPlacement> placements;      // layout order (reverse of list order)
  std::vector<Range> buckets;                  // `bucket_indices`
  std::vector<int64_t> bucket_numel_unpadded;  // `per_bucket_numel_unpadded`
  // End of the last bucket (the buffer's numel), 0 without buckets.
  int64_t numel() const { return buckets.empty() ? 0 : buckets.back().end; }
};

// `_compute_per_buffer_param_layout` over `buffer`'s parameters of `spec`, sharded over `dp`.
BufferLayout distopt_buffer_layout(const CaseSpec& spec, const BufferParams& buffer, int64_t dp);
// `_compute_default_per_buffer_param_layout`: reverse order, no padding, no embedding split.
BufferLayout default_buffer_layout(const CaseSpec& spec, const BufferParams& buffer);
// `compute_full_param_layout`: every buffer of `spec`, expert buffers sharded over expert_dp.
std::vector<BufferLayout> full_param_layout(const CaseSpec& spec);

}  // namespace sc::model
