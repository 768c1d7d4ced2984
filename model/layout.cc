#include "model/layout.h"

#include <cassert>
#include <algorithm>
#include <numeric>

namespace sc::model {

int64_t pad_to_divisor(int64_t value, int64_t divisor) {
  assert(divisor > 0 && value >= 0);
  return (value + divisor - 1) / divisor * divisor;
}

int64_t pad_param_start(int64_t value) { return pad_to_divisor(value, kParamAlignment); }

int64_t bucket_end_divisor(int64_t dp, bool high_busbw) {
  assert(dp > 0);
  int64_t d = std::lcm(dp, kBucketEndFactor);
  return high_busbw ? std::lcm(d, kHighBusbwFactor) : d;
}

std::vector<BufferParams> group_params_for_buffers(const CaseSpec& spec) {
  std::vector<int> chunks;
  for (const ParamSpec& p : spec.params) chunks.push_back(p.chunk);
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  std::vector<BufferParams> buffers;
  for (int chunk : chunks) {
    const size_t first = buffers.size();
    for (int i = 0; i < static_cast<int>(spec.params.size()); ++i) {
      const ParamSpec& p = spec.params[i];
      if (p.chunk != chunk) continue;
      BufferKey key{p.dtype, grad_buffer_dtype(spec, p), p.is_expert};
      auto it = buffers.begin() + first;
      while (it != buffers.end() && !(it->key == key)) ++it;
      if (it == buffers.end()) {
        buffers.push_back(BufferParams{key, chunk, {}});
        it = buffers.end() - 1;
      }
      it->params.push_back(i);
    }
  }
  return buffers;
}

namespace {

// Closes the open bucket [bucket_start, unpadded_end); returns the padded end.
int64_t close_bucket(BufferLayout& l, int64_t bucket_start, int64_t unpadded_end, int64_t divisor) {
  l.bucket_numel_unpadded.push_back(unpadded_end - bucket_start);
  int64_t padded_end = divisor == 0 ? unpadded_end : pad_to_divisor(unpadded_end, divisor);
  l.buckets.push_back(Range{bucket_start, padded_end});
  return padded_end;
}

// The shared reverse walk; `padded` selects the distributed-optimizer rules.
BufferLayout walk(const CaseSpec& c, const BufferParams& buffer, int64_t dp, bool padded) {
  BufferLayout l;
  l.key = buffer.key;
  l.chunk = buffer.chunk;
  l.dp = dp;
  const int64_t divisor = padded ? bucket_end_divisor(dp, c.pad_for_high_nccl_busbw) : 0;
  int64_t start = 0;
  int64_t bucket_start = 0;
  int64_t end = 0;
  int bucket_id = 0;
  int open = 0;  // parameters in the open bucket
  const std::optional<int64_t> bucket_size = chunk_bucket_size(c, buffer.chunk);
  for (auto it = buffer.params.rbegin(); it != buffer.params.rend(); ++it) {
    const ParamSpec& p = c.params[*it];
    const bool alone = padded && p.shared_embedding;
    if (padded) start = pad_param_start(start);
    if (alone && open > 0) {  // pre-split: the unpadded end includes the 64-alignment gap
      bucket_start = start = close_bucket(l, bucket_start, start, divisor);
      ++bucket_id;
      open = 0;
    }
    end = start + p.numel();
    l.placements.push_back(ParamPlacement{*it, Range{start, end}, bucket_id});
    ++open;
    if ((bucket_size && end - bucket_start >= *bucket_size) || alone) {
      bucket_start = start = close_bucket(l, bucket_start, end, divisor);
      ++bucket_id;
      open = 0;
    } else {
      start = end;
    }
  }
  if (open > 0) close_bucket(l, bucket_start, end, divisor);
  return l;
}

}  // namespace

BufferLayout distopt_buffer_layout(const CaseSpec& spec, const BufferParams& buffer, int64_t dp) {
  return walk(spec, buffer, dp, /*padded=*/true);
}

BufferLayout default_buffer_layout(const CaseSpec& spec, const BufferParams& buffer) {
  return walk(spec, buffer, /*dp=*/1, /*padded=*/false);
}

std::vector<BufferLayout> full_param_layout(const CaseSpec& spec) {
  std::vector<BufferLayout> out;
  for (const BufferParams& b : group_params_for_buffers(spec)) {
    out.push_back(distopt_buffer_layout(spec, b, b.key.is_expert ? spec.expert_dp : spec.dp));
  }
  return out;
}

}  // namespace sc::model
