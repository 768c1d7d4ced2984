#include "sim/port/distrib_optimizer.h"

#include <set>

#include "sim/port/fused_adam.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/port/device.h"
#include "sim/port/hybrid_optimizer.h"
#include "sim/port/optim_state.h"

namespace sc::sut {

namespace {


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
      behaviour.has(Deviation::kShardSizeForDoubleDp) ? gbuf_size / (2 * world) : gbuf_size / world;
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
                                           TensorAttrs* attrs, const Probe& before_hand_over,
                                           Streams* streams)
    : config_(config),
      behaviour_(behaviour),
      accelerator_(accelerator),
      model_params_(model_params),
      buffers_(std::move(buffers)),
      attrs_(attrs),
      own_streams_(streams ? nullptr : std::make_unique<ImmediateStreams>()),
      streams_(streams ? streams : own_streams_.get()),
      optimizer_(std::move(inner)) {
  // Megatron's `Adam` is TE's FusedAdam when Transformer Engine is installed, else torch's AdamW.
  TORCH_CHECK(dynamic_cast<torch::optim::AdamW*>(optimizer_.get()) ||
                  dynamic_cast<torch::optim::Adam*>(optimizer_.get()) ||
                  dynamic_cast<FusedAdam*>(optimizer_.get()) ||
                  dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get()),
              "Only Adam and HybridDeviceOptimizer currently supported.");
  // Identity of a model parameter: its TensorImpl, as Python dicts key by the Parameter.
  std::map<const void*, int> param_index;
  for (int i = 0; i < static_cast<int>(model_params_.size()); ++i) {
    param_index[tensor_key(model_params_[i].param)] = i;
  }
  auto& groups = optimizer_->param_groups();
  std::map<int, int> world_param_group_map;  // model param -> inner group
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    for (const auto& p : groups[g].params()) {
      TORCH_CHECK(p.requires_grad(), "inner optimizer param does not require grad");
      auto it = param_index.find(tensor_key(p));
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
  if (behaviour_.has(Deviation::kStaleIndexMap)) {
    model_param_group_index_map_ = local_param_group_map;
  }
  for (size_t g = 0; !behaviour_.has(Deviation::kStaleIndexMap) && g < opt_group_ranges_.size();
       ++g) {
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
                                                         accelerator_, attrs_, behaviour_,
                                                         streams_, hdo->engine());
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
        torch::Tensor source =
            behaviour_.has(Deviation::kPr6982) ? model_param.detach() : model_param;
        if (behaviour_.has(Deviation::kDetachModelParam)) source = model_param.detach_();
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
        } else if (shard_grad.scalar_type() == torch::kFloat) {
          shard.mutable_grad() = shard_grad;  // `.float()` of an fp32 tensor is the tensor
        } else {
          // `.float()`: a new tensor now, its values once the cast on the current stream ran.
          torch::Tensor cast = torch::full(shard_grad.sizes(), std::nanf(""),
                                           shard_grad.options().dtype(torch::kFloat));
          streams_->name(cast, "fp32 grad of " + mp.name);
          streams_->enqueue(Streams::kCurrent, "main grad .float()", {shard_grad}, {cast},
                            [cast, shard_grad]() mutable { cast.copy_(shard_grad); });
          shard.mutable_grad() = cast;
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
        const Range world = behaviour_.has(Deviation::kDs03CopyBackSlice)
                                ? ranges.gbuf_world
                                : ranges.gbuf_world_in_bucket;
        const torch::Tensor& shard_main = shard_main_groups[g][i];
        TORCH_CHECK(world.size() == shard_main.numel(), "world range size != main param numel");
        const auto [gbuf_index, bucket_index] = param_gbuf_map_.at(param);
        const Bucket& bucket = buffers_[gbuf_index]->buckets()[bucket_index];
        // Mutant DS-05: a 16-bit buffer addressed at fp32-sized offsets.
        const bool half = bucket.param_data.element_size() == 2;
        const int64_t start =
            behaviour_.has(Deviation::kDs05Fp32Stride) && half ? 2 * world.start : world.start;
        torch::Tensor dst = bucket.param_data.view(-1).slice(0, start, start + world.size());
        TORCH_CHECK(dst.numel() == shard_main.numel(), "copy-back slice leaves the bucket");
        const torch::Tensor src = shard_main.detach();
        streams_->enqueue(Streams::kCurrent, "main param to param buffer", {src}, {dst},
                          [dst, src]() mutable { dst.copy_(src); });
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
  const bool fix = behaviour_.has(Deviation::kF3);
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

void DistributedOptimizer::set_grad_scaler(std::unique_ptr<GradScaler> scaler,
                                           std::function<bool(bool)> reduce_max) {
  grad_scaler_ = std::move(scaler);
  found_inf_reduce_max_ = std::move(reduce_max);
}

bool DistributedOptimizer::unscale_main_grads_and_check_for_nan() {
  // `_collect_main_grad_data_for_unscaling`: the grad of every param of the inner optimizer's
  // groups, `.decoupled_grad` when precision-aware.
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  const float inv_scale = grad_scaler_->inv_scale().cpu().item<float>();
  bool found_inf = false;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& param : group.params()) {
      torch::Tensor grad = pa ? attrs_->decoupled_grad(param) : param.grad();
      // `torch._amp_foreach_non_finite_check_and_unscale_`: each element read in fp32, checked,
      // multiplied by inv_scale unless that is 1, and stored back in the grad's dtype.
      const torch::Tensor value = grad.to(torch::kFloat);
      found_inf = found_inf || !torch::isfinite(value).all().item<bool>();
      if (inv_scale != 1.0f) grad.copy_(value.mul(inv_scale));
    }
  }
  // MP-found-inf-not-reduced: each rank decides from its own shards.
  if (found_inf_reduce_max_ && !behaviour_.has(Deviation::kFoundInfNotReduced)) {
    found_inf = found_inf_reduce_max_(found_inf);
  }
  return found_inf;
}

void DistributedOptimizer::set_grad_stats(double clip_grad, bool log_num_zeros_in_grad,
                                          GradStatsSum sum) {
  config_.clip_grad = clip_grad;
  config_.log_num_zeros_in_grad = log_num_zeros_in_grad;
  grad_stats_sum_ = std::move(sum);
}

std::vector<torch::Tensor> DistributedOptimizer::main_grads_for_grad_norm() const {
  // CLIP-pa-reads-grad: `.grad` read even when precision-aware (it is None there).
  const bool decoupled = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8 &&
                         !behaviour_.has(Deviation::kClipPaReadsGrad);
  std::vector<torch::Tensor> grads;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& param : group.params()) {
      torch::Tensor grad = decoupled ? attrs_->decoupled_grad(param) : param.grad();
      if (grad.defined()) grads.push_back(grad);
    }
  }
  return grads;
}

double DistributedOptimizer::clip_grad_norm(double clip_grad) {
  const std::vector<torch::Tensor> grads = main_grads_for_grad_norm();
  // CLIP-norm-not-reduced: each rank's norm of its own shards only.
  const double grad_norm = get_grad_norm_fp32(
      grads, behaviour_.has(Deviation::kClipNormNotReduced) ? GradStatsSum() : grad_stats_sum_);
  // `clip_grad_by_total_norm_fp32(params, ...)` collects the same grads again (no separate
  // grad-norm groups here) and asserts (bare `assert`s) fp32 grads, or, precision-aware, fp32 or
  // bf16 decoupled grads: fp16 ones raise (F12: accepted).
  if (clip_grad > 0.0 && !grads.empty()) {
    const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
    const bool fp16_ok = pa && behaviour_.has(Deviation::kF12);
    for (const auto& g : grads) {
      const auto t = g.scalar_type();
      TORCH_CHECK(t == torch::kFloat || (pa && t == torch::kBFloat16) ||
                      (fp16_ok && t == torch::kHalf),
                  "AssertionError: ");
    }
    clip_grad_by_total_norm_fp32(grads, clip_grad, grad_norm,
                                 behaviour_.has(Deviation::kClipAlwaysScaled));
  }
  return grad_norm;
}

int64_t DistributedOptimizer::count_zeros() const {
  return count_zeros_fp32(main_grads_for_grad_norm(), grad_stats_sum_);
}

StepResult DistributedOptimizer::step() {
  torch::NoGradGuard no_grad;
  copy_model_grads_to_main_grads();
  // CLIP-before-unscale: the norm taken (and the grads clipped) while they are still scaled.
  std::optional<double> early_norm;
  if (behaviour_.has(Deviation::kClipBeforeUnscale) && config_.clip_grad > 0.0) {
    streams_->synchronize();
    early_norm = clip_grad_norm(config_.clip_grad);
  }
  if (grad_scaler_) {
    const bool found_inf = unscale_main_grads_and_check_for_nan();
    grad_scaler_->update(found_inf);
    // MP-step-despite-inf: the early return on inf/NaN dropped.
    if (found_inf && !behaviour_.has(Deviation::kStepDespiteInf)) return StepResult{};
  }
  StepResult result{true, 0.0, 0};
  // The norm and the count end in `.item()`, which waits for the device; the port reads the
  // grads on the host, so it waits first.
  if (config_.clip_grad > 0.0 || config_.log_num_zeros_in_grad) streams_->synchronize();
  // ZEROS-counted-before-clipping: the count taken ahead of the clipping.
  if (config_.log_num_zeros_in_grad && behaviour_.has(Deviation::kZerosBeforeClipping)) {
    result.num_zeros_in_grad = count_zeros();
  }
  if (config_.clip_grad > 0.0) {
    result.grad_norm = early_norm ? *early_norm : clip_grad_norm(config_.clip_grad);
  }
  if (config_.log_num_zeros_in_grad && !behaviour_.has(Deviation::kZerosBeforeClipping)) {
    result.num_zeros_in_grad = count_zeros();
  }
  if (dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get())) {
    optimizer_->step();  // enqueues its own work
  } else {
    streams_->enqueue(Streams::kCurrent, "optimizer step", {}, {}, [this] { optimizer_->step(); });
  }
  copy_main_params_to_model_params();
  return result;
}

}  // namespace sc::sut
