#include "sim/sut/distrib_optimizer.h"

#include <algorithm>
#include <map>

#include "sim/sut/device.h"
#include "sim/sut/hybrid_optimizer.h"

namespace sc::sut {

namespace {

const void* key(const torch::Tensor& t) { return t.unsafeGetTensorImpl(); }

// `_build_model_gbuf_param_range_map`.
BucketRangeMap build_model_gbuf_param_range_map(const PerBufferParamLayout& layout,
                                                Range gbuf_world_range, int64_t bucket_offset) {
  BucketRangeMap out;
  out.gbuf_world = gbuf_world_range;
  for (const auto& [param, world_start, world_end, bucket_id] : layout.param_index_map) {
    (void)bucket_id;
    const int64_t local_start = std::max<int64_t>(0, world_start - gbuf_world_range.start);
    const int64_t local_end = std::min(gbuf_world_range.size(), world_end - gbuf_world_range.start);
    if (local_end > local_start) {
      ParamRangeMap m;
      m.gbuf_local = Range{local_start, local_end};
      m.gbuf_world = m.gbuf_local.normalize(local_start + gbuf_world_range.start);
      m.gbuf_world_in_bucket =
          Range{m.gbuf_world.start - bucket_offset, m.gbuf_world.end - bucket_offset};
      m.param = m.gbuf_local.normalize(std::max<int64_t>(0, gbuf_world_range.start - world_start));
      out.param_map.emplace_back(param, m);
    }
  }
  return out;
}

// `_build_model_gbuf_range`.
BucketRangeMap build_model_gbuf_range(const ParamAndGradBuffer& buffer, size_t bucket_index,
                                      const Behaviour& behaviour) {
  const int64_t rank = buffer.dp_rank();
  const int64_t world = buffer.dp_size();
  const Bucket& bucket = buffer.buckets()[bucket_index];
  const int64_t gbuf_size = bucket.grad_data.numel();
  TORCH_CHECK(gbuf_size % world == 0, "Each bucket's buffer size should be divisible by ", world);
  const int64_t max_range =
      behaviour.mutant_shard_size_for_double_dp ? gbuf_size / (2 * world) : gbuf_size / world;
  std::vector<Range> all;
  for (int64_t r = 0; r < world; ++r) {
    const int64_t start = r * max_range;
    const int64_t end = std::min(gbuf_size, start + max_range);
    all.push_back(Range{start + bucket.offset, end + bucket.offset});
  }
  return build_model_gbuf_param_range_map(buffer.layout(), all[rank], bucket.offset);
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(std::unique_ptr<torch::optim::Optimizer> inner,
                                           const OptimizerConfig& config,
                                           std::vector<ModelParam>& model_params,
                                           std::vector<const ParamAndGradBuffer*> buffers,
                                           const Behaviour& behaviour, torch::Device accelerator,
                                           TensorAttrs* attrs, const Probe& before_hand_over)
    : config_(config),
      behaviour_(behaviour),
      accelerator_(accelerator),
      model_params_(model_params),
      buffers_(std::move(buffers)),
      attrs_(attrs),
      optimizer_(std::move(inner)) {
  TORCH_CHECK(dynamic_cast<torch::optim::AdamW*>(optimizer_.get()) ||
                  dynamic_cast<torch::optim::Adam*>(optimizer_.get()) ||
                  dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get()),
              "Only Adam and HybridDeviceOptimizer currently supported.");
  // Identity of a model parameter: its TensorImpl, as Python dicts key by the Parameter.
  std::map<const void*, int> param_index;
  for (int i = 0; i < static_cast<int>(model_params_.size()); ++i) {
    param_index[key(model_params_[i].param)] = i;
  }
  auto& groups = optimizer_->param_groups();
  std::map<int, int> world_param_group_map;  // model param -> inner group
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    for (const auto& p : groups[g].params()) {
      TORCH_CHECK(p.requires_grad(), "inner optimizer param does not require grad");
      auto it = param_index.find(key(p));
      TORCH_CHECK(it != param_index.end(), "inner optimizer holds a tensor that is no model param");
      world_param_group_map[it->second] = g;
    }
  }

  // gbuf ranges, filtered to this optimizer's params (`_filter_gbuf_range_map`).
  for (const ParamAndGradBuffer* buffer : buffers_) {
    GbufRangeMap map{buffer->key().param_dtype, buffer->key().grad_dtype, {}};
    for (size_t b = 0; b < buffer->buckets().size(); ++b) {
      BucketRangeMap m = build_model_gbuf_range(*buffer, b, behaviour_);
      auto& pm = m.param_map;
      pm.erase(std::remove_if(pm.begin(), pm.end(),
                              [&](const auto& e) { return !world_param_group_map.count(e.first); }),
               pm.end());
      map.buckets.push_back(std::move(m));
    }
    gbuf_ranges_.push_back(std::move(map));
  }
  // `_build_model_param_gbuf_map`: param -> (gbuf index, bucket index).
  std::map<int, std::pair<int, int>>& param_gbuf_map = param_gbuf_map_;
  for (int gi = 0; gi < static_cast<int>(gbuf_ranges_.size()); ++gi) {
    for (int b = 0; b < static_cast<int>(gbuf_ranges_[gi].buckets.size()); ++b) {
      for (const auto& [param, ranges] : gbuf_ranges_[gi].buckets[b].param_map) {
        (void)ranges;
        TORCH_CHECK(!param_gbuf_map.count(param),
                    "Param should not be in param_gbuf_map; each param only belongs to a single "
                    "bucket.");
        param_gbuf_map[param] = {gi, b};
      }
    }
  }
  // `main_param = None`, `main_param_sharded = True` on every 16-bit param of the inner groups.
  for (const auto& [param, g] : world_param_group_map) {
    (void)g;
    ModelParam& mp = model_params_[param];
    if (mp.param.scalar_type() == torch::kHalf || mp.param.scalar_type() == torch::kBFloat16) {
      mp.main_param = torch::Tensor();
      mp.main_param_sharded = true;
    }
  }
  // `_build_optimizer_group_ranges`.
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    opt_group_ranges_.push_back(GroupRange{{}, g});
  }
  std::vector<std::pair<int, std::pair<int, int>>> local_param_group_map;
  for (const GbufRangeMap& map : gbuf_ranges_) {
    for (const BucketRangeMap& bucket : map.buckets) {
      for (const auto& entry : bucket.param_map) {
        const int g = world_param_group_map.at(entry.first);
        opt_group_ranges_[g].params.push_back(entry.first);
        local_param_group_map.push_back(
            {entry.first, {g, static_cast<int>(opt_group_ranges_[g].params.size()) - 1}});
      }
    }
  }
  build_model_and_main_param_groups();

  // Rebuild the index map in installed order: [*model_fp32_group, *model_float16_group].
  if (behaviour_.mutant_stale_index_map) {
    model_param_group_index_map_ = local_param_group_map;
  }
  for (size_t g = 0; !behaviour_.mutant_stale_index_map && g < opt_group_ranges_.size(); ++g) {
    std::vector<int> order = model_fp32_groups_[g];
    order.insert(order.end(), model_float16_groups_[g].begin(), model_float16_groups_[g].end());
    for (size_t i = 0; i < order.size(); ++i) {
      model_param_group_index_map_.push_back(
          {order[i], {static_cast<int>(g), static_cast<int>(i)}});
    }
  }

  if (before_hand_over) before_hand_over(*this);

  if (auto* hdo = dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get())) {
    // A brand-new HDO over the mutated groups, with the old one's defaults: this runs
    // Optimizer::add_param_group and its leaf check.
    std::vector<torch::optim::OptimizerParamGroup> new_groups;
    for (const auto& g : hdo->param_groups()) new_groups.emplace_back(g);
    HdoOptions defaults = hdo->hdo_defaults();
    optimizer_ = std::make_unique<HybridDeviceOptimizer>(std::move(new_groups), defaults,
                                                         accelerator_, attrs_, behaviour_);
  }
  // Otherwise the groups were assigned in place; Python's load_state_dict(state_dict()) re-keys
  // a still-empty state and changes nothing.
}

const ParamRangeMap& DistributedOptimizer::ranges_of(int param) const {
  const auto [gbuf_index, bucket_index] = param_gbuf_map_.at(param);
  const auto& pm = gbuf_ranges_[gbuf_index].buckets[bucket_index].param_map;
  const auto it =
      std::find_if(pm.begin(), pm.end(), [&](const auto& e) { return e.first == param; });
  return it->second;
}

void DistributedOptimizer::build_model_and_main_param_groups() {
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  auto& inner_groups = optimizer_->param_groups();
  for (const GroupRange& group_range : opt_group_ranges_) {
    std::vector<int> model_float16_this, model_fp32_this;
    std::vector<torch::Tensor> shard_float16_this, shard_fp32_this, shard_fp32_from_float16_this;
    for (int param : group_range.params) {
      ModelParam& mp = model_params_[param];
      torch::Tensor& model_param = mp.param;
      TORCH_CHECK(model_param.requires_grad(), "assert model_param.requires_grad");
      const Range param_range = ranges_of(param).param;
      const std::string type = megatron_type(model_param, accelerator_);
      if (type == "torch.cuda.HalfTensor" || type == "torch.cuda.BFloat16Tensor") {
        torch::Tensor shard_model_param =
            model_param.detach().view(-1).slice(0, param_range.start, param_range.end);
        torch::Tensor shard_main_param;
        if (!pa) shard_main_param = shard_model_param.clone().to(torch::kFloat);
        mp.main_param = shard_main_param;
        mp.main_param_sharded = true;
        model_float16_this.push_back(param);
        shard_float16_this.push_back(shard_model_param);
        shard_fp32_from_float16_this.push_back(shard_main_param);
      } else if (type == "torch.cuda.FloatTensor") {
        torch::Tensor source = behaviour_.detach_fp32_shard ? model_param.detach() : model_param;
        torch::Tensor shard_model_param =
            source.view(-1).slice(0, param_range.start, param_range.end);
        model_fp32_this.push_back(param);
        shard_fp32_this.push_back(shard_model_param);
      } else {
        throw TypeErrorLike(
            "Wrapped parameters must be one of torch.cuda.FloatTensor,  torch.cuda.HalfTensor, "
            "or torch.cuda.BFloat16Tensor. Received " +
            type);
      }
    }
    std::vector<torch::Tensor> installed = shard_fp32_this;
    const auto& derived = pa ? shard_float16_this : shard_fp32_from_float16_this;
    installed.insert(installed.end(), derived.begin(), derived.end());
    inner_groups[group_range.orig_group].params() = installed;  // mutates the inner group
    installed_.push_back(std::move(installed));
    model_float16_groups_.push_back(std::move(model_float16_this));
    model_fp32_groups_.push_back(std::move(model_fp32_this));
    shard_float16_groups_.push_back(std::move(shard_float16_this));
    shard_fp32_groups_.push_back(std::move(shard_fp32_this));
    shard_fp32_from_float16_groups_.push_back(std::move(shard_fp32_from_float16_this));
  }
}

}  // namespace sc::sut

namespace sc::sut {

void DistributedOptimizer::copy_model_grads_to_main_grads() {
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  auto copy_group_grads = [&](const std::vector<std::vector<int>>& model_groups,
                              const std::vector<std::vector<torch::Tensor>>& shard_groups) {
    for (size_t g = 0; g < model_groups.size(); ++g) {
      for (size_t i = 0; i < model_groups[g].size(); ++i) {
        const ModelParam& mp = model_params_[model_groups[g][i]];
        torch::Tensor shard = shard_groups[g][i];
        const Range r = ranges_of(model_groups[g][i]).param;
        TORCH_CHECK(r.size() == shard.numel(), "param range size != shard numel");
        torch::Tensor shard_grad = mp.main_grad.view(-1).slice(0, r.start, r.end);
        if (pa) {
          attrs_->set_decoupled_grad(shard, shard_grad);
        } else {
          shard.mutable_grad() = shard_grad.to(torch::kFloat);  // `.float()`: aliases if fp32
        }
      }
    }
  };
  copy_group_grads(model_float16_groups_, pa ? shard_float16_groups_ : shard_fp32_from_float16_groups_);
  copy_group_grads(model_fp32_groups_, shard_fp32_groups_);
}

void DistributedOptimizer::copy_main_params_to_model_params() {
  if (config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8) return;
  auto copy_group_params = [&](const std::vector<std::vector<torch::Tensor>>& shard_main_groups,
                               const std::vector<std::vector<int>>& model_groups) {
    for (size_t g = 0; g < model_groups.size(); ++g) {
      for (size_t i = 0; i < model_groups[g].size(); ++i) {
        const int param = model_groups[g][i];
        const ParamRangeMap& ranges = ranges_of(param);
        // DS-03: index the bucket with the absolute buffer range.
        const Range world =
            behaviour_.mutant_ds03_copy_back_slice ? ranges.gbuf_world : ranges.gbuf_world_in_bucket;
        const torch::Tensor& shard_main = shard_main_groups[g][i];
        TORCH_CHECK(world.size() == shard_main.numel(), "world range size != main param numel");
        const auto [gbuf_index, bucket_index] = param_gbuf_map_.at(param);
        const Bucket& bucket = buffers_[gbuf_index]->buckets()[bucket_index];
        torch::Tensor dst = bucket.param_data.view(-1).slice(0, world.start, world.end);
        TORCH_CHECK(dst.numel() == shard_main.numel(), "copy-back slice leaves the bucket");
        dst.copy_(shard_main.detach());
      }
    }
  };
  copy_group_params(shard_fp32_from_float16_groups_, model_float16_groups_);
  copy_group_params(shard_fp32_groups_, model_fp32_groups_);
}

void DistributedOptimizer::reload_model_params() {
  torch::NoGradGuard no_grad;
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  auto* hdo = dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get());
  const bool fix = behaviour_.fix_hdo_reload_refreshes_copies;
  if (hdo && !fix) {
    hdo->update_fp32_param_by_new_param();
    return;
  }
  if (pa) {
    if (hdo) hdo->update_fp32_param_by_new_param();  // F3 fix: host copies refreshed there
    return;
  }
  auto copy_group = [&](const std::vector<std::vector<int>>& model_groups,
                        const std::vector<std::vector<torch::Tensor>>& main_groups) {
    for (size_t g = 0; g < model_groups.size(); ++g) {
      for (size_t i = 0; i < model_groups[g].size(); ++i) {
        const Range r = ranges_of(model_groups[g][i]).param;
        const torch::Tensor& model_param = model_params_[model_groups[g][i]].param;
        main_groups[g][i].detach().copy_(model_param.detach().view(-1).slice(0, r.start, r.end));
      }
    }
  };
  copy_group(model_float16_groups_, shard_fp32_from_float16_groups_);
  copy_group(model_fp32_groups_, shard_fp32_groups_);
  if (hdo) hdo->update_fp32_param_by_new_param();  // F3 fix: then the hybrid optimizer's copies
}

void DistributedOptimizer::zero_grad(bool set_to_none) {
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  // `_zero_grad_group_helper`: None entries skipped; in place: detach a grad with a grad_fn,
  // else clear its requires_grad, then zero it.
  auto clear = [&](torch::Tensor t) {
    if (!t.defined()) return;
    if (pa) {
      if (!attrs_->has_decoupled_grad(t)) return;
      torch::Tensor g = attrs_->decoupled_grad(t);
      if (set_to_none || !g.defined()) {
        attrs_->set_decoupled_grad(t, torch::Tensor());
      } else {
        g.zero_();
      }
      return;
    }
    if (!t.grad().defined()) return;
    if (set_to_none) {
      t.mutable_grad() = torch::Tensor();
    } else {
      torch::Tensor& g = t.mutable_grad();
      if (g.grad_fn()) {
        g = g.detach();
      } else {
        g.requires_grad_(false);
      }
      g.zero_();
    }
  };
  for (const auto* groups : {&model_float16_groups_, &model_fp32_groups_}) {
    for (const auto& g : *groups) {
      for (int p : g) clear(model_params_[p].param);
    }
  }
  std::vector<const std::vector<std::vector<torch::Tensor>>*> shard_lists{&shard_float16_groups_,
                                                                         &shard_fp32_groups_};
  if (!pa) shard_lists.push_back(&shard_fp32_from_float16_groups_);
  for (const auto* groups : shard_lists) {
    for (const auto& g : *groups) {
      for (const auto& t : g) clear(t);
    }
  }
}

void DistributedOptimizer::step() {
  torch::NoGradGuard no_grad;
  copy_model_grads_to_main_grads();
  optimizer_->step();
  copy_main_params_to_model_params();
}

}  // namespace sc::sut
