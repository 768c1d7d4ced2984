#include "sim/port/param_buffer.h"

#include <numeric>
#include <set>

namespace sc::sut {

namespace {

int64_t pad_to_divisor(int64_t value, int64_t divisor) {
  return (value + divisor - 1) / divisor * divisor;
}

int64_t pad_param_start(int64_t index, int64_t alignment) {
  return pad_to_divisor(index, alignment);
}

int64_t pad_bucket_end(int64_t end, int64_t dp, bool high_busbw, bool product) {
  int64_t divisor = product ? dp * 128 : std::lcm<int64_t>(dp, 128);
  if (high_busbw) divisor = std::lcm<int64_t>(divisor, int64_t{1} << 16);
  return pad_to_divisor(end, divisor);
}

}  // namespace

std::vector<std::pair<BufferKey, std::vector<int>>> group_params_for_buffers(
    const std::vector<ModelParam>& params, const std::vector<int>& chunk_params,
    bool grad_reduce_in_fp32) {
  std::vector<std::pair<BufferKey, std::vector<int>>> out;
  for (int i : chunk_params) {
    const torch::Tensor& p = params[i].param;
    TORCH_CHECK(p.requires_grad(), "group_params_for_buffers: parameter '", params[i].name,
                "' does not require grad");
    BufferKey key{p.scalar_type(), grad_reduce_in_fp32 ? torch::kFloat : p.scalar_type(),
                  !params[i].allreduce};
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) {
      return e.first.param_dtype == key.param_dtype && e.first.grad_dtype == key.grad_dtype &&
             e.first.is_expert_parallel == key.is_expert_parallel;
    });
    if (it == out.end()) {
      out.push_back({key, {}});
      it = out.end() - 1;
    }
    it->second.push_back(i);
  }
  return out;
}

PerBufferParamLayout compute_per_buffer_param_layout(const std::vector<ModelParam>& params,
                                                     const std::vector<int>& buffer_params,
                                                     std::optional<int64_t> bucket_size,
                                                     int64_t dp_size, const DdpConfig& ddp) {
  PerBufferParamLayout layout;
  int64_t param_start_index = 0;
  int64_t bucket_start_index = 0;
  int64_t param_end_index = 0;
  std::set<int> bucket_params;
  int bucket_id = 0;
  auto finalize_bucket = [&](int64_t end) {
    layout.per_bucket_numel_unpadded.push_back(end - bucket_start_index);
    const int64_t bucket_end_index =
        pad_bucket_end(end, dp_size, ddp.pad_buckets_for_high_nccl_busbw, ddp.bucket_pad_product);
    layout.bucket_indices.push_back({bucket_start_index, bucket_end_index});
    bucket_start_index = bucket_end_index;
    ++bucket_id;
  };
  std::vector<int> order(buffer_params.rbegin(), buffer_params.rend());
  if (ddp.forward_order) order.assign(buffer_params.begin(), buffer_params.end());
  for (auto it = order.begin(); it != order.end(); ++it) {
    const ModelParam& p = params[*it];
    param_start_index = pad_param_start(param_start_index, ddp.param_alignment);
    if (p.shared_embedding && !bucket_params.empty()) {
      finalize_bucket(param_start_index);
      bucket_params.clear();
      param_start_index = bucket_start_index;
    }
    param_end_index = param_start_index + p.param.numel();
    layout.param_index_map.emplace_back(*it, param_start_index, param_end_index, bucket_id);
    bucket_params.insert(*it);
    if ((bucket_size && param_end_index - bucket_start_index >= *bucket_size) ||
        p.shared_embedding) {
      finalize_bucket(param_end_index);
      bucket_params.clear();
      param_start_index = bucket_start_index;
    } else {
      param_start_index = param_end_index;
    }
  }
  if (!bucket_params.empty()) finalize_bucket(param_end_index);
  return layout;
}

PerBufferParamLayout compute_default_per_buffer_param_layout(
    const std::vector<ModelParam>& params, const std::vector<int>& buffer_params,
    std::optional<int64_t> bucket_size) {
  PerBufferParamLayout layout;
  int64_t param_start_index = 0;
  int64_t bucket_start_index = 0;
  int64_t param_end_index = 0;
  std::set<int> bucket_params;
  int bucket_id = 0;
  for (auto it = buffer_params.rbegin(); it != buffer_params.rend(); ++it) {
    param_end_index = param_start_index + params[*it].param.numel();
    layout.param_index_map.emplace_back(*it, param_start_index, param_end_index, bucket_id);
    bucket_params.insert(*it);
    if (bucket_size && param_end_index - bucket_start_index >= *bucket_size) {
      layout.per_bucket_numel_unpadded.push_back(param_end_index - bucket_start_index);
      layout.bucket_indices.push_back({bucket_start_index, param_end_index});
      bucket_start_index = param_end_index;
      bucket_params.clear();
      ++bucket_id;
    }
    param_start_index = param_end_index;
  }
  if (!bucket_params.empty()) {
    layout.per_bucket_numel_unpadded.push_back(param_end_index - bucket_start_index);
    layout.bucket_indices.push_back({bucket_start_index, param_end_index});
  }
  return layout;
}

ParamAndGradBuffer::ParamAndGradBuffer(const DdpConfig& ddp, BufferKey key,
                                       std::vector<ModelParam>& params,
                                       std::vector<int> buffer_params, int64_t dp_size,
                                       int64_t dp_rank, torch::Device device)
    : key_(key), dp_size_(dp_size), dp_rank_(dp_rank) {
  layout_ = ddp.use_distributed_optimizer
                ? compute_per_buffer_param_layout(params, buffer_params, ddp.bucket_size,
                                                  dp_size, ddp)
                : compute_default_per_buffer_param_layout(params, buffer_params,
                                                          ddp.bucket_size);
  numel_ = layout_.bucket_indices.empty() ? 0 : layout_.bucket_indices.back().second;
  if (ddp.use_distributed_optimizer) {
    TORCH_CHECK(numel_ % dp_size_ == 0, "buffer numel ", numel_, " is not divisible by dp ",
                dp_size_);
  }
  auto on = torch::TensorOptions().device(device);
  grad_data_ = torch::zeros({numel_}, on.dtype(key_.grad_dtype));
  if (ddp.use_distributed_optimizer) {
    param_data_ = torch::zeros({numel_}, on.dtype(key_.param_dtype));
  }
  for (const auto& [index, start, end, bucket_id] : layout_.param_index_map) {
    ModelParam& mp = params[index];
    torch::NoGradGuard no_grad;
    if (param_data_.defined()) {
      torch::Tensor view = param_data_.slice(0, start, end).view(mp.param.sizes());
      view.copy_(mp.param);
      mp.param.set_data(view);  // `param.data = new view`: same leaf, storage now in the buffer
    }
    mp.main_grad = grad_data_.slice(0, start, end).view(mp.param.sizes());
  }
  for (size_t b = 0; b < layout_.bucket_indices.size(); ++b) {
    const auto [start, end] = layout_.bucket_indices[b];
    if (ddp.use_distributed_optimizer) {
      TORCH_CHECK(start % dp_size_ == 0 && end % dp_size_ == 0, "bucket [", start, ",", end,
                  ") is not divisible by dp ", dp_size_);
    }
    buckets_.push_back(Bucket{start, layout_.per_bucket_numel_unpadded[b],
                              param_data_.defined() ? param_data_.slice(0, start, end)
                                                    : torch::Tensor(),
                              grad_data_.slice(0, start, end), {}});
  }
  for (const auto& [index, start, end, bucket_id] : layout_.param_index_map) {
    Bucket& bucket = buckets_.at(bucket_id);
    bucket.param_to_index.push_back({index, {start - bucket.offset, end - bucket.offset}});
  }
}

}  // namespace sc::sut
