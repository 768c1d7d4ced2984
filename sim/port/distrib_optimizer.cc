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

// ---- state_dict / load_state_dict and the parameter state (distrib_optimizer.py ~836-1241) ----

namespace {

[[noreturn]] void assertion_error(const std::string& what) {
  TORCH_CHECK(false, "AssertionError: ", what);
}

// lr, betas, eps and weight decay of a group, whatever the inner optimizer.
SavedGroup read_group(const torch::optim::OptimizerOptions& o) {
  SavedGroup g;
  if (const auto* a = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) {
    g.lr = a->lr();
    g.beta1 = std::get<0>(a->betas());
    g.beta2 = std::get<1>(a->betas());
    g.eps = a->eps();
    g.weight_decay = a->weight_decay();
  } else if (const auto* f = dynamic_cast<const FusedAdamOptions*>(&o)) {
    g = SavedGroup{GroupKey{}, f->lr(), f->beta1(), f->beta2(), f->eps(), f->weight_decay(),
                   std::nullopt};
  } else {
    const auto& h = static_cast<const HdoOptions&>(o);
    g = SavedGroup{GroupKey{}, h.lr(), h.beta1(), h.beta2(), h.eps(), h.weight_decay(),
                   std::nullopt};
  }
  return g;
}

void write_group(torch::optim::OptimizerOptions& o, const SavedGroup& g) {
  if (auto* a = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
    a->lr(g.lr).betas({g.beta1, g.beta2}).eps(g.eps).weight_decay(g.weight_decay);
  } else if (auto* f = dynamic_cast<FusedAdamOptions*>(&o)) {
    // The loaded group dict replaces the live one: without a saved "step" TE starts again at 1.
    f->lr(g.lr).beta1(g.beta1).beta2(g.beta2).eps(g.eps).weight_decay(g.weight_decay);
    f->step(g.step.value_or(0));
  } else {
    auto& h = static_cast<HdoOptions&>(o);
    h.lr(g.lr).beta1(g.beta1).beta2(g.beta2).eps(g.eps).weight_decay(g.weight_decay);
  }
}

torch::Tensor step_tensor(int64_t step) {
  return torch::full({}, static_cast<double>(step), torch::kFloat);
}

}  // namespace

torch::Tensor DistributedOptimizer::installed_tensor(int param) const {
  for (const auto& [p, where] : model_param_group_index_map_) {
    if (p == param) return optimizer_->param_groups().at(where.first).params().at(where.second);
  }
  TORCH_CHECK(false, "KeyError: model param ", param, " is not in the group index map");
}

std::vector<SavedGroup> DistributedOptimizer::group_hyper_parameters() const {
  std::vector<SavedGroup> out;
  for (const auto& g : optimizer_->param_groups()) out.push_back(read_group(g.options()));
  return out;
}

DistOptStateDict DistributedOptimizer::state_dict() const {
  const auto* hdo = dynamic_cast<const HybridDeviceOptimizer*>(optimizer_.get());
  const auto* fused = dynamic_cast<const FusedAdam*>(optimizer_.get());
  const bool have_te = hdo || fused;  // HAVE_APEX_OR_TE: the port's torch AdamW stands for "no"
  const auto& groups = optimizer_->param_groups();
  std::optional<int64_t> step;
  if (!have_te) {
    std::set<int64_t> steps;
    for (const auto& [k, s] : optimizer_->state()) {
      steps.insert(static_cast<const torch::optim::AdamWParamState&>(*s).step());
    }
    // F5 fix: a fresh optimizer (no state yet, as when a checkpoint load starts) has no step.
    const bool fresh = steps.empty() && behaviour_.has(Deviation::kF5);
    if (steps.size() != 1 && !fresh) assertion_error("len(steps) == 1");
    if (!fresh) step = *steps.begin();
  } else if (hdo) {
    step = hdo->first_host_adamw_step();
    // F5 fix: without a host AdamW (fraction 0) the step is the accelerator FusedAdam's.
    if (!step && behaviour_.has(Deviation::kF5)) step = hdo->accelerator_group_step();
  } else {
    std::set<int64_t> steps;
    for (const auto& g : groups) {
      const int64_t s = static_cast<const FusedAdamOptions&>(g.options()).step();
      if (!g.params().empty() && s > 0) steps.insert(s);  // "step" in g: set at the first step
    }
    if (steps.size() > 1) assertion_error("steps: more than one group step");
    if (!steps.empty()) step = *steps.begin();
  }
  DistOptStateDict sd;
  for (size_t g = 0; g < groups.size(); ++g) {
    SavedGroup saved = read_group(groups[g].options());
    saved.key = g < group_keys_.size() ? group_keys_[g] : GroupKey{};
    // Without TE every group takes the step; with TE or the HDO only a known one is written.
    saved.step = step;
    sd.param_groups.push_back(saved);
  }
  return sd;
}

void DistributedOptimizer::load_state_dict(const DistOptStateDict& sd, uint64_t dummy_step_seed) {
  torch::NoGradGuard no_grad;
  auto* hdo = dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get());
  auto* fused = dynamic_cast<FusedAdam*>(optimizer_.get());
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  if (hdo && hdo->state_empty()) hdo->dummy_step(dummy_step_seed, attrs_);

  // Saved groups by identifier keys (a later duplicate wins, as in the dict Megatron builds).
  auto identify = [&](GroupKey k) {
    if (behaviour_.has(Deviation::kMeg06DropLrMult)) k.lr_mult = 1.0;
    return k;
  };
  std::map<GroupKey, SavedGroup> by_key;
  for (const SavedGroup& g : sd.param_groups) by_key[identify(g.key)] = g;
  auto& groups = optimizer_->param_groups();
  std::vector<SavedGroup> merged;
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupKey k = identify(g < group_keys_.size() ? group_keys_[g] : GroupKey{});
    auto it = by_key.find(k);
    TORCH_CHECK(it != by_key.end(), "KeyError: no saved param group with the keys of group ", g);
    merged.push_back(it->second);
  }

  if (hdo) {
    // Torch AdamW's tensor step on every entry, from the saved groups.
    std::set<int64_t> steps;
    for (const SavedGroup& g : sd.param_groups) {
      if (g.step) steps.insert(*g.step);
    }
    if (steps.size() > 1) assertion_error("steps: more than one saved step");
    if (!steps.empty()) hdo->set_state_steps(*steps.begin());
    HdoStateDict inner = hdo->state_dict();
    for (size_t g = 0; g < merged.size(); ++g) {
      inner.groups[g] = HdoStateDict::Group{merged[g].lr, merged[g].beta1, merged[g].beta2,
                                            merged[g].eps, merged[g].weight_decay};
    }
    hdo->load_state_dict(inner);
  } else {
    const bool empty = optimizer_->state().empty();
    std::set<int64_t> steps;
    for (const SavedGroup& g : sd.param_groups) {
      if (g.step) steps.insert(*g.step);
    }
    const bool no_step = steps.empty() && behaviour_.has(Deviation::kF5);  // F5 fix
    if (!fused && steps.size() != 1 && !no_step) assertion_error("len(steps) == 1");
    for (size_t g = 0; g < groups.size(); ++g) {
      write_group(groups[g].options(), merged[g]);
      for (const torch::Tensor& p : groups[g].params()) {
        void* const k = sc::sut::optim_state_key(p);
        // Placeholder state (torch.empty) where there is none yet; else the live state, which
        // torch's load_state_dict copies (cast to the parameter's dtype).
        if (fused) {
          const FusedAdamState* live = fused->state_of(p);
          torch::Tensor m = empty || !live ? torch::empty({p.numel()}, torch::kFloat)
                                           : live->exp_avg().clone();
          torch::Tensor v = empty || !live ? torch::empty({p.numel()}, torch::kFloat)
                                           : live->exp_avg_sq().clone();
          torch::Tensor master;
          if (pa) {
            const bool rem = config_.store_param_remainders && config_.bf16;
            master = empty || !live ? torch::empty({p.numel()}, rem ? torch::kShort : torch::kFloat)
                                    : live->master_param().clone();
          }
          fused->load_state_entry(p, m.view(p.sizes()), v.view(p.sizes()),
                                  master.defined() ? master.view(p.sizes()) : master);
          continue;
        }
        auto& state = optimizer_->state();
        auto it = state.find(k);
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        if (empty || it == state.end()) {
          s->exp_avg(torch::empty(p.sizes(), p.options()));
          s->exp_avg_sq(torch::empty(p.sizes(), p.options()));
        } else {
          const auto& live = static_cast<const torch::optim::AdamWParamState&>(*it->second);
          s->exp_avg(live.exp_avg().to(p.options()).clone());
          s->exp_avg_sq(live.exp_avg_sq().to(p.options()).clone());
        }
        s->step(no_step ? 0 : *steps.begin());
        state[k] = std::move(s);
      }
    }
  }
  if (sd.param_state) {
    switch (sd.param_state->sharding) {
      case ParamStateDict::Sharding::kDpZero:
        load_parameter_state_from_dp_zero(sd.param_state->dp_zero);
        break;
      case ParamStateDict::Sharding::kFullyReshardable:
        load_parameter_state_from_fully_reshardable(sd.param_state->fully_reshardable);
        break;
      case ParamStateDict::Sharding::kDpReshardable:
        load_parameter_state_from_dp_reshardable(sd.param_state->dp_reshardable);
        break;
      case ParamStateDict::Sharding::kFullyShardedModelSpace:
        load_parameter_state_from_fs_model_space(sd.param_state->fs_model_space);
        break;
    }
  }
}

ParamStateTensors DistributedOptimizer::get_main_param_and_optimizer_states(int param) const {
  const torch::Tensor t = installed_tensor(param);
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  const auto* hdo = dynamic_cast<const HybridDeviceOptimizer*>(optimizer_.get());
  const auto* fused = dynamic_cast<const FusedAdam*>(optimizer_.get());
  ParamStateTensors tensors;
  if (hdo) {
    tensors = hdo->state_tensors(t);
  } else if (fused) {
    if (const FusedAdamState* s = fused->state_of(t)) {
      tensors["exp_avg"] = s->exp_avg();
      tensors["exp_avg_sq"] = s->exp_avg_sq();
      if (s->master_param().defined()) tensors["master_param"] = s->master_param();
    }
  } else {
    auto it = optimizer_->state().find(sc::sut::optim_state_key(t));
    if (it != optimizer_->state().end()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      tensors["exp_avg"] = s.exp_avg();
      tensors["exp_avg_sq"] = s.exp_avg_sq();
      tensors["step"] = step_tensor(s.step());
    }
  }
  // The state's non-tensor entries: upstream skips them (`isinstance(v, torch.Tensor)`); the
  // MEG-07 mutant takes them, and precision-aware FusedAdam then asks for their unscaled value.
  if (behaviour_.has(Deviation::kMeg07NonTensorState) && !tensors.empty()) {
    for (const std::string& k : non_tensor_state_) {
      TORCH_CHECK(!(pa && fused), "AttributeError: FusedAdam.get_unscaled_state: state '", k,
                  "' is not a tensor and has no 'dtype'");
      tensors[k] = torch::Tensor();
    }
  }
  if (pa) {
    auto it = tensors.find("master_param");
    TORCH_CHECK(it != tensors.end(), "KeyError: 'master_param'");
    tensors["param"] = it->second;
    tensors.erase(it);
  } else {
    tensors["param"] = t;
  }
  return tensors;
}

void DistributedOptimizer::set_main_param_and_optimizer_states(int param,
                                                               const ParamStateTensors& tensors) {
  torch::NoGradGuard no_grad;
  const torch::Tensor t = installed_tensor(param);
  const bool pa = config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8;
  auto* hdo = dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get());
  auto* fused = dynamic_cast<FusedAdam*>(optimizer_.get());
  if (pa) {
    for (const auto& [k, v] : tensors) {
      if (!v.defined()) {
        // A non-tensor entry: upstream skips it; the MEG-07 mutant assigns it into hdo.state
        // (nothing the port keeps) or hands it to FusedAdam.set_scaled_state, which fails.
        TORCH_CHECK(!fused || !behaviour_.has(Deviation::kMeg07NonTensorState),
                    "AttributeError: FusedAdam.set_scaled_state: '", k,
                    "' is not a tensor and has no 'dtype'");
        continue;
      }
      if (hdo) {
        hdo->assign_state(t, k == "param" ? "master_param" : k, v);
      } else if (k == "param" && behaviour_.has(Deviation::kF9) &&
                 v.scalar_type() == torch::kFloat && fused->state_of(t) &&
                 fused->state_of(t)->master_param().scalar_type() == torch::kShort) {
        // F9 fix: an fp32 master for a remainder-keeping bf16 param is split again.
        torch::Tensor param = t.detach();
        torch::Tensor rem = torch::empty(t.sizes(), torch::kShort);
        split_remainder_master(v.reshape(t.sizes()), param, rem);
        fused->set_master_state(t, rem);
      } else if (k == "param") {
        fused->set_master_state(t, v);
      } else {
        const FusedAdamState* s = fused->state_of(t);
        if (!s) fused->initialize_state(t);
        s = fused->state_of(t);
        TORCH_CHECK(k == "exp_avg" || k == "exp_avg_sq", "FusedAdam has no state ", k);
        (k == "exp_avg" ? s->exp_avg() : s->exp_avg_sq()).copy_(v);
      }
    }
    return;
  }
  // Every tensor-valued entry of the live state must be in `tensors` (a KeyError otherwise).
  const ParamStateTensors dst = get_main_param_and_optimizer_states(param);
  for (const auto& [k, live] : dst) {
    auto src = tensors.find(k);
    if (src == tensors.end() && k == "step" && behaviour_.has(Deviation::kF5)) continue;
    TORCH_CHECK(src != tensors.end(), "KeyError: '", k, "'");
    // A non-tensor saved entry: upstream skips it; the MEG-07 mutant copies it as well.
    if (!src->second.defined() && !behaviour_.has(Deviation::kMeg07NonTensorState)) continue;
    TORCH_CHECK(live.defined(), "AttributeError: the non-tensor state entry '", k,
                "' has no attribute 'copy_'");
    TORCH_CHECK(src->second.defined(), "TypeError: copy_(): the saved state entry '", k,
                "' is not a tensor");
    if (k == "param") {
      t.detach().copy_(src->second);
    } else if (hdo) {
      hdo->copy_state(t, k, src->second);
    } else if (k == "step") {
      auto it = optimizer_->state().find(sc::sut::optim_state_key(t));
      static_cast<torch::optim::AdamWParamState&>(*it->second)
          .step(static_cast<int64_t>(src->second.item<double>()));
    } else {
      live.copy_(src->second);
    }
  }
}

DpReshardableState DistributedOptimizer::get_parameter_state_dp_reshardable() const {
  DpReshardableState out;
  for (const GbufRangeMap& gbuf : gbuf_ranges_) {
    std::vector<std::vector<ParamStateTensors>> buckets;
    for (const BucketRangeMap& bucket : gbuf.buckets) {
      std::vector<ParamStateTensors> params;
      for (const auto& [param, ranges] : bucket.param_map) {
        (void)ranges;
        params.push_back(get_main_param_and_optimizer_states(param));
      }
      buckets.push_back(std::move(params));
    }
    out.push_back(std::move(buckets));
  }
  return out;
}

void DistributedOptimizer::load_parameter_state_from_dp_reshardable(
    const DpReshardableState& state) {
  for (size_t b = 0; b < gbuf_ranges_.size(); ++b) {
    for (size_t k = 0; k < gbuf_ranges_[b].buckets.size(); ++k) {
      const auto& param_map = gbuf_ranges_[b].buckets[k].param_map;
      const auto& saved = state.at(b).at(k);
      TORCH_CHECK(saved.size() == param_map.size(), "AssertionError: ", saved.size(),
                  " saved params in bucket, ", param_map.size(), " here");
      for (size_t i = 0; i < param_map.size(); ++i) {
        set_main_param_and_optimizer_states(param_map[i].first, saved[i]);
      }
    }
  }
}

std::vector<ParamStateTensors> DistributedOptimizer::param_state_fs_model_space() const {
  std::vector<ParamStateTensors> out;
  for (const auto& gbuf : get_parameter_state_dp_reshardable()) {
    for (const auto& bucket : gbuf) {
      for (ParamStateTensors t : bucket) {
        for (const auto& [k, v] : t) {
          // Each entry but `step` becomes a ShardedTensor of `dtype=v.dtype`.
          TORCH_CHECK(k == "step" || v.defined(), "AttributeError: the non-tensor state entry '",
                      k, "' has no attribute 'dtype'");
        }
        t["fp32_param"] = t.at("param");
        t.erase("param");
        out.push_back(std::move(t));
      }
    }
  }
  return out;
}

void DistributedOptimizer::load_parameter_state_from_fs_model_space(
    const std::vector<ParamStateTensors>& state) {
  // Mutant PT-04: entry k of the saved list goes to the k-th local param taken group by group.
  std::vector<int> group_order;
  if (behaviour_.has(Deviation::kPt04GroupOrder)) {
    for (const GroupRange& g : opt_group_ranges_) {
      group_order.insert(group_order.end(), g.params.begin(), g.params.end());
    }
  }
  size_t index = 0;
  for (const GbufRangeMap& gbuf : gbuf_ranges_) {
    for (const BucketRangeMap& bucket : gbuf.buckets) {
      for (auto [param, ranges] : bucket.param_map) {
        (void)ranges;
        if (behaviour_.has(Deviation::kPt04GroupOrder)) param = group_order.at(index);
        ParamStateTensors src;
        for (const auto& [k, v] : state.at(index)) {
          if (k == "step") continue;  // read from the param groups instead
          src[k == "fp32_param" ? "param" : k] = v;
        }
        set_main_param_and_optimizer_states(param, src);
        ++index;
      }
    }
  }
  if (auto* hdo = dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get())) {
    hdo->sync_state_to_sub_optimizers();
  }
}

// --- The gathered formats: "dp_zero_gather_scatter" and "fully_reshardable" ---

namespace {

// The keys get_parameter_state_dp_zero() gathers, in its order.
const char* const kDpZeroKeys[] = {"param", "exp_avg", "exp_avg_sq"};

// `tensor[start:end]` of a 1-d tensor with Python's clamping at both ends.
torch::Tensor py_slice(const torch::Tensor& t, int64_t start, int64_t end) {
  const int64_t n = t.numel();
  start = std::min(std::max<int64_t>(start, 0), n);
  end = std::min(std::max(end, start), n);
  return t.slice(0, start, end);
}

}  // namespace

DpZeroLocalShards DistributedOptimizer::dp_zero_local_shards() const {
  torch::NoGradGuard no_grad;
  DpZeroLocalShards out;
  for (size_t b = 0; b < gbuf_ranges_.size(); ++b) {
    const ParamAndGradBuffer& buffer = *buffers_[b];
    std::vector<std::map<std::string, torch::Tensor>> buckets;
    for (size_t k = 0; k < gbuf_ranges_[b].buckets.size(); ++k) {
      const int64_t world_numel = buffer.buckets()[k].grad_data.numel();
      if (world_numel % buffer.dp_size() != 0) {
        assertion_error("gbuf_world_numel % data_parallel_world_size == 0");
      }
      const int64_t local_numel = world_numel / buffer.dp_size();
      std::map<std::string, torch::Tensor> shards;
      for (const char* key : kDpZeroKeys) shards[key] = torch::zeros({local_numel}, torch::kFloat);
      const auto* fused = dynamic_cast<const FusedAdam*>(optimizer_.get());
      for (const auto& [param, ranges] : gbuf_ranges_[b].buckets[k].param_map) {
        ParamStateTensors tensors = get_main_param_and_optimizer_states(param);
        if (behaviour_.has(Deviation::kF9) && fused &&
            config_.use_precision_aware_optimizer_no_fp8_or_ds_fp8) {
          tensors["param"] = fused->master_of(installed_tensor(param));  // F9 fix
        }
        for (const char* key : kDpZeroKeys) {
          auto it = tensors.find(key);
          TORCH_CHECK(it != tensors.end(), "KeyError: '", key, "'");
          shards[key]
              .slice(0, ranges.gbuf_local.start, ranges.gbuf_local.end)
              .copy_(it->second.detach().cpu().reshape(-1));
        }
      }
      buckets.push_back(std::move(shards));
    }
    out.push_back(std::move(buckets));
  }
  return out;
}

DpZeroState gather_parameter_state_dp_zero(const std::vector<const DistributedOptimizer*>& group) {
  TORCH_CHECK(!group.empty(), "gather_parameter_state_dp_zero: an empty DP group");
  std::vector<DpZeroLocalShards> shards;
  for (const DistributedOptimizer* rank : group) shards.push_back(rank->dp_zero_local_shards());
  const DistributedOptimizer& zero = *group.front();
  DpZeroState out;
  for (size_t b = 0; b < zero.buffers().size(); ++b) {
    const ParamAndGradBuffer& buffer = *zero.buffers()[b];
    TORCH_CHECK(buffer.dp_size() == static_cast<int64_t>(group.size()),
                "gather_parameter_state_dp_zero: ", group.size(), " ranks for DP size ",
                buffer.dp_size());
    DpZeroBufferState world;
    for (const Bucket& bucket : buffer.buckets()) world.numel_unpadded += bucket.numel_unpadded;
    for (const char* key : kDpZeroKeys) {
      world.tensors[key] = torch::zeros({world.numel_unpadded}, torch::kFloat);
    }
    int64_t offset = 0;
    for (size_t k = 0; k < buffer.buckets().size(); ++k) {
      const int64_t unpadded = buffer.buckets()[k].numel_unpadded;
      for (const char* key : kDpZeroKeys) {
        std::vector<torch::Tensor> received;
        for (const DpZeroLocalShards& rank : shards) received.push_back(rank.at(b).at(k).at(key));
        world.tensors[key].slice(0, offset, offset + unpadded).copy_(
            torch::cat(received).slice(0, 0, unpadded));
      }
      offset += unpadded;
    }
    out.push_back(std::move(world));
  }
  return out;
}

std::vector<ModelSpaceParamState> DistributedOptimizer::sharded_param_state_fully_reshardable(
    const DpZeroState& world) const {
  std::vector<ModelSpaceParamState> out;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const ParamAndGradBuffer& buffer = *buffers_[b];
    const DpZeroBufferState& packed = world.at(b);
    // The end padding stripped before each bucket (PR #5077).
    std::vector<int64_t> stripped{0};
    for (size_t k = 0; k + 1 < buffer.buckets().size(); ++k) {
      const Bucket& bucket = buffer.buckets()[k];
      stripped.push_back(stripped.back() + bucket.grad_data.numel() - bucket.numel_unpadded);
    }
    for (const auto& [param, world_start, world_end, bucket_id] :
         buffer.layout().param_index_map) {
      int64_t start = world_start, end = world_end;
      if (behaviour_.has(Deviation::kF7)) {
        start -= stripped.at(bucket_id);
        end -= stripped.at(bucket_id);
      }
      ModelSpaceParamState entry;
      entry.param = param;
      for (const char* key : kDpZeroKeys) {
        const torch::Tensor& w = packed.tensors.at(key);
        if (behaviour_.has(Deviation::kF7) && end > w.numel()) {
          assertion_error("range [" + std::to_string(start) + ", " + std::to_string(end) +
                          ") runs past the coalesced buffer (" + std::to_string(w.numel()) +
                          " elements)");
        }
        torch::Tensor t = py_slice(w, start, end);
        const int64_t missing = (end - start) - t.numel();
        if (missing > 0) {
          // Upstream pads with zeros and warns "param range exceeds unpadded buffer".
          if (!(world_end > buffer.numel_unpadded())) {
            assertion_error("param_world_end > buffer.numel_unpadded");
          }
          t = torch::cat({t, torch::zeros({missing}, t.options())});
        }
        entry.tensors[key] = t.reshape(model_params_[param].param.sizes());
      }
      out.push_back(std::move(entry));
    }
  }
  return out;
}

void DistributedOptimizer::load_parameter_state_from_fully_reshardable(
    const std::vector<ParamStateTensors>& state) {
  size_t index = 0;
  for (size_t b = 0; b < gbuf_ranges_.size(); ++b) {
    // The ChainMap over the buckets' param maps: the first bucket holding a param wins.
    std::map<int, Range> local;
    for (const BucketRangeMap& bucket : gbuf_ranges_[b].buckets) {
      for (const auto& [param, ranges] : bucket.param_map) local.emplace(param, ranges.param);
    }
    for (const auto& entry : buffers_[b]->layout().param_index_map) {
      const int param = std::get<0>(entry);
      const size_t k = index++;  // counted whether or not the param is local
      auto it = local.find(param);
      if (it == local.end()) continue;
      const Range r = it->second;
      ParamStateTensors src;
      for (const auto& [key, v] : state.at(k)) {
        if (key == "step") continue;  // torch Adam's step comes from the param groups
        torch::Tensor flat = py_slice(v.flatten(), r.start, r.end);
        TORCH_CHECK(flat.numel() == r.size(), "AssertionError: (", flat.numel(), ", ", r.start,
                    ", ", r.end, ")");
        src[key == "fp32_param" ? "param" : key] = flat;
      }
      set_main_param_and_optimizer_states(param, src);
    }
  }
  if (auto* hdo = dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get())) {
    hdo->sync_state_to_sub_optimizers();
  }
}

void DistributedOptimizer::load_parameter_state_from_dp_zero(const DpZeroState& world) {
  for (size_t b = 0; b < gbuf_ranges_.size(); ++b) {
    const ParamAndGradBuffer& buffer = *buffers_[b];
    const DpZeroBufferState& packed = world.at(b);
    if (buffer.dp_rank() == 0 && buffer.numel_unpadded() != packed.numel_unpadded) {
      assertion_error("Number of unpadded elements must be same in current run (" +
                      std::to_string(buffer.numel_unpadded()) + ") and checkpoint (" +
                      std::to_string(packed.numel_unpadded) + ")");
    }
    // recv_tensors: params in the order the buckets first name them.
    std::vector<int> order;
    std::map<int, ParamStateTensors> received;
    for (const char* key : kDpZeroKeys) {
      int64_t offset = 0;
      for (size_t k = 0; k < gbuf_ranges_[b].buckets.size(); ++k) {
        const Bucket& bucket = buffer.buckets()[k];
        const int64_t world_numel = bucket.grad_data.numel();
        if (world_numel % buffer.dp_size() != 0) {
          assertion_error("gbuf_world_numel % data_parallel_world_size == 0");
        }
        const int64_t local_numel = world_numel / buffer.dp_size();
        const torch::Tensor& w = packed.tensors.at(key);
        const int64_t start = offset, end = offset + bucket.numel_unpadded;
        if (!(0 <= start && start < end && end <= w.numel())) {
          assertion_error("0 <= start < end <= world_tensors.numel()");
        }
        offset += behaviour_.has(Deviation::kDs07DpZeroPaddedOffsets) ? world_numel
                                                                      : bucket.numel_unpadded;
        const torch::Tensor padded =
            torch::cat({w.slice(0, start, end), torch::zeros({world_numel - (end - start)})});
        const torch::Tensor recv =
            padded.slice(0, buffer.dp_rank() * local_numel, (buffer.dp_rank() + 1) * local_numel);
        for (const auto& [param, ranges] : gbuf_ranges_[b].buckets[k].param_map) {
          if (!received.count(param)) order.push_back(param);
          received[param][key] = recv.slice(0, ranges.gbuf_local.start, ranges.gbuf_local.end);
        }
      }
    }
    for (int param : order) set_main_param_and_optimizer_states(param, received.at(param));
  }
  if (behaviour_.has(Deviation::kF8)) {
    if (auto* hdo = dynamic_cast<HybridDeviceOptimizer*>(optimizer_.get())) {
      hdo->sync_state_to_sub_optimizers();
    }
  }
}

}  // namespace sc::sut
