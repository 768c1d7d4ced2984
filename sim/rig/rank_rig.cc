#include "sim/rig/rank_rig.h"
#include "sim/rig/rank_rig_impl.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "sim/rig/grad_scalers.h"
#include "sim/rig/grad_stats_group.h"
#include "sim/rig/host_block_cache.h"
#include "sim/rig/initial_values.h"
#include "sim/engines/engines.h"
#include "sim/rig/stream_sim.h"
#include "sim/port/distrib_optimizer.h"
#include "sim/port/fused_adam.h"
#include "sim/port/hybrid_optimizer.h"
#include "sim/port/param_buffer.h"
#include "sim/port/tensor_attrs.h"
#include "sim/port/optim_state.h"
#include "sim/port/torch_adamw.h"

namespace sc::rig {

namespace {

// A model parameter holding `values` (representable in its dtype): a tensor of its own, as
// `torch.nn.Parameter(...)` makes one, never a view of another (finding P4).
torch::Tensor make_param(const model::ParamSpec& spec, torch::Device device,
                         const std::vector<float>& values) {
  torch::Tensor host = torch::from_blob(const_cast<float*>(values.data()), spec.shape,
                                        torch::kFloat);
  return host.to(device, to_torch_dtype(spec.dtype), /*non_blocking=*/false, /*copy=*/true)
      .requires_grad_(true);
}

model::Range to_model(const sut::Range& r) { return model::Range{r.start, r.end}; }

ObservedTensor observe(const torch::Tensor& t, int case_param, const sut::ModelParam& mp) {
  ObservedTensor o;
  o.param = case_param;
  if (!t.defined()) return o;
  o.dtype = to_model_dtype(t.scalar_type());
  o.numel = t.numel();
  o.is_leaf = t.is_leaf();
  o.requires_grad = t.requires_grad();
  o.has_grad_fn = t.grad_fn() != nullptr;
  if (t.is_alias_of(mp.param) && t.scalar_type() == mp.param.scalar_type()) {
    const auto bytes = static_cast<const char*>(t.data_ptr()) -
                       static_cast<const char*>(mp.param.data_ptr());
    const int64_t offset = bytes / static_cast<int64_t>(t.element_size());
    if (offset >= 0 && offset + t.numel() <= mp.param.numel()) {
      o.aliases_model = true;
      o.alias_offset = offset;
    }
  }
  o.model_has_main_param =
      mp.main_param.defined() && mp.main_param.unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
  return o;
}

}  // namespace

void RankRigImpl::make_params(const ParamValues& values) {
  const bool expert = instance == model::Instance::kExpert;
  initial = values;
  for (int i = 0; i < static_cast<int>(c.params.size()); ++i) {
    const model::ParamSpec& spec = c.params[i];
    if (spec.is_expert != expert) continue;
    torch::Tensor t = make_param(spec, device, values[static_cast<size_t>(i)]);
    sut::ModelParam mp;
    mp.name = spec.name;
    mp.param = t;
    mp.shared_embedding = spec.shared_embedding;
    mp.allreduce = !spec.is_expert;
    params.push_back(std::move(mp));
    case_index.push_back(i);
  }
}

std::vector<const sut::ParamAndGradBuffer*> RankRigImpl::make_buffers() {
  sut::DdpConfig ddp;
  ddp.grad_reduce_in_fp32 = c.grad_reduce_in_fp32;
  ddp.pad_buckets_for_high_nccl_busbw = c.pad_for_high_nccl_busbw;
  if (behaviour.has(sut::Deviation::kAlign32)) ddp.param_alignment = 32;
  if (behaviour.has(sut::Deviation::kAlignOffByOne)) ddp.param_alignment = 63;
  ddp.bucket_pad_product = behaviour.has(sut::Deviation::kBucketPadProduct);
  ddp.forward_order = behaviour.has(sut::Deviation::kForwardOrder);
  const int64_t dp = model::instance_dp(c, instance);
  std::vector<const sut::ParamAndGradBuffer*> buffer_ptrs;
  std::map<int, std::vector<int>> chunks;  // model chunk -> its params, ascending chunks
  for (size_t i = 0; i < params.size(); ++i) {
    chunks[c.params[case_index[i]].chunk].push_back(static_cast<int>(i));
  }
  for (const auto& [chunk, members] : chunks) {
    sut::DdpConfig chunk_ddp = ddp;  // each model chunk is its own DDP instance
    chunk_ddp.bucket_size = model::chunk_bucket_size(c, chunk);
    for (auto& [key, in_buffer] :
         sut::group_params_for_buffers(params, members, ddp.grad_reduce_in_fp32)) {
      buffers.push_back(std::make_unique<sut::ParamAndGradBuffer>(chunk_ddp, key, params,
                                                                  in_buffer, dp, rank, device));
      buffer_ptrs.push_back(buffers.back().get());
    }
  }
  for (size_t k = 0; k < buffers.size(); ++k) {
    if (buffers[k]->param_data().defined()) {
      streams->name(buffers[k]->param_data(), "param buffer " + std::to_string(k));
    }
    streams->name(buffers[k]->grad_data(), "grad buffer " + std::to_string(k));
  }
  for (const auto& mp : params) streams->name(mp.param, mp.name);
  return buffer_ptrs;
}

std::vector<int> RankRigImpl::group_ids() const {
  const bool expert = instance == model::Instance::kExpert;
  std::vector<int> ids;
  for (const model::ParamSpec& p : c.params) {
    if (p.is_expert == expert) ids.push_back(p.group);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::unique_ptr<torch::optim::Optimizer> RankRigImpl::make_inner_optimizer(
    const std::vector<int>& ids) {
  // The inner optimizer over the full model params, one group per distinct group index.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (int g : ids) {
    std::vector<torch::Tensor> members;
    for (size_t i = 0; i < params.size(); ++i) {
      if (c.params[case_index[i]].group == g) members.push_back(params[i].param);
    }
    if (c.cpu_offload) {
      sut::HdoOptions o;
      o.weight_decay(group_weight_decay(g));
      groups.emplace_back(members, std::make_unique<sut::HdoOptions>(o));
    } else if (c.transformer_engine) {  // TE's FusedAdam (precision-aware or not)
      groups.emplace_back(members, std::make_unique<sut::FusedAdamOptions>(
                                       sut::FusedAdamOptions().weight_decay(group_weight_decay(g))));
    } else {
      groups.emplace_back(members, std::make_unique<torch::optim::AdamWOptions>(
                                       torch::optim::AdamWOptions(1e-3).weight_decay(
                                           group_weight_decay(g))));
    }
  }
  if (c.cpu_offload) {
    sut::HdoOptions defaults;
    defaults.offload_fraction(c.offload_fraction)
        .param_update_in_fp32(true)
        .overlap_cpu_optimizer_d2h_h2d(c.overlap_cpu_optimizer_d2h_h2d)
        .gpu_optimizer_cls(c.transformer_engine ? sut::AcceleratorAdam::kFusedAdam
                                                : sut::AcceleratorAdam::kTorchAdamW);
    return std::make_unique<sut::HybridDeviceOptimizer>(std::move(groups), defaults, device,
                                                        &attrs, behaviour, streams.get(),
                                                        engines::engine_for(behaviour).get());
  }
  if (c.precision_aware) {
    // The factory's precision-aware TE FusedAdam: master weights, decoupled grads, remainders.
    sut::FusedAdamFlags flags;
    flags.use_decoupled_grad = true;
    flags.master_weights = !behaviour.has(sut::Deviation::kPaNoMasterWeights);
    flags.store_param_remainders = c.store_param_remainders;
    return std::make_unique<sut::FusedAdam>(std::move(groups), sut::FusedAdamOptions(), &attrs,
                                            flags, behaviour);
  }
  if (c.transformer_engine) {
    // The factory's Adam class with TE installed: FusedAdam in AdamW mode over the fp32 mains.
    return std::make_unique<sut::FusedAdam>(std::move(groups), sut::FusedAdamOptions(), &attrs,
                                            sut::FusedAdamFlags(), behaviour);
  }
  // Without Transformer Engine (the factory's USING_PYTORCH_OPTIMIZER): torch's AdamW with its
  // defaults (no `fused`).
  return std::make_unique<sut::TorchAdamW>(std::move(groups), /*fused=*/false, behaviour);
}

void RankRigImpl::observe_ranges(const sut::DistributedOptimizer& d) {
  const bool expert = instance == model::Instance::kExpert;
  for (size_t k = 0; k < d.gbuf_ranges().size(); ++k) {
    const sut::GbufRangeMap& map = d.gbuf_ranges()[k];
    model::BufferRanges br{model::BufferKey{to_model_dtype(map.param_dtype),
                                            to_model_dtype(map.grad_dtype), expert},
                           {}};
    for (size_t b = 0; b < map.buckets.size(); ++b) {
      model::BucketRanges mb{to_model(map.buckets[b].gbuf_world), {}, {}};
      for (const auto& [p, r] : map.buckets[b].param_map) {
        mb.param_map.push_back(model::ParamRanges{case_index[p], to_model(r.gbuf_world),
                                                  to_model(r.gbuf_world_in_bucket),
                                                  to_model(r.gbuf_local), to_model(r.param)});
      }
      mb.param_index = param_index_of(buffers.at(k)->buckets().at(b));
      br.buckets.push_back(std::move(mb));
    }
    obs.ranges.push_back(std::move(br));
  }
}

std::vector<std::pair<int, model::Range>> RankRigImpl::param_index_of(
    const sut::Bucket& bucket) const {
  std::vector<std::pair<int, model::Range>> out;
  for (const auto& [p, range] : bucket.param_to_index) {
    out.push_back({case_index[p], model::Range{range.first, range.second}});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& x, const auto& y) { return x.second.start < y.second.start; });
  return out;
}

void RankRigImpl::observe_groups(const sut::DistributedOptimizer& d) {
  for (size_t g = 0; g < d.opt_group_ranges().size(); ++g) {
    std::vector<int> order = d.model_fp32_groups()[g];
    order.insert(order.end(), d.model_float16_groups()[g].begin(),
                 d.model_float16_groups()[g].end());
    const auto& tensors = d.installed(g);
    std::vector<ObservedTensor> group;
    for (size_t i = 0; i < tensors.size(); ++i) {
      group.push_back(observe(tensors[i], case_index[order[i]], params[order[i]]));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!group[i].aliases_model && tensors[i].defined()) {
        streams->name(tensors[i], "fp32 main param of " + params[order[i]].name);
      }
    }
    obs.groups.push_back(std::move(group));
    installed.push_back(tensors);
    installed_param.push_back(order);
  }
  for (const auto& [p, where] : d.model_param_group_index_map()) {
    obs.index_map[case_index[p]] = where;
  }
}

void RankRigImpl::construct(std::unique_ptr<torch::optim::Optimizer> inner,
                            const std::vector<const sut::ParamAndGradBuffer*>& buffer_ptrs) {
  sut::OptimizerConfig config;
  config.use_precision_aware_optimizer_no_fp8_or_ds_fp8 = c.precision_aware;
  config.store_param_remainders = c.store_param_remainders;
  for (const model::ParamSpec& p : c.params) {
    config.bf16 = config.bf16 || p.dtype == model::DType::kBFloat16;
  }
  // What construction installed, observed before the hybrid optimizer's rebuild can raise.
  auto probe = [this](const sut::DistributedOptimizer& d) {
    observe_ranges(d);
    observe_groups(d);
  };
  try {
    dist = std::make_unique<sut::DistributedOptimizer>(std::move(inner), config, params,
                                                       buffer_ptrs, behaviour, device, &attrs,
                                                       probe, streams.get());
  } catch (const sut::TypeErrorLike& e) {
    obs.error = e.what();
    obs.error_type = "TypeError";
  } catch (const c10::Error& e) {
    obs.error = e.msg();
    // torch.optim raises ValueError for the leaf check; other checks are assertions.
    obs.error_type = *obs.error == "can't optimize a non-leaf Tensor" ? "ValueError"
                                                                      : "RuntimeError";
    for (const auto& g : obs.groups) {
      for (const auto& t : g) {
        if (obs.failing_param < 0 && !t.is_leaf) obs.failing_param = t.param;
      }
    }
  }
}

void RankRigImpl::set_group_keys(const std::vector<int>& ids) {
  const bool expert = instance == model::Instance::kExpert;
  // Identifier keys of the optimizer groups: unique per group, as Megatron's groups are.
  std::vector<sut::GroupKey> keys;
  for (const sut::GroupRange& gr : dist->opt_group_ranges()) {
    const int id = ids.at(static_cast<size_t>(gr.orig_group));
    keys.push_back(sut::GroupKey{group_weight_decay(id) > 0 ? 1.0 : 0.0, 1.0 + id, expert, false});
  }
  dist->set_group_keys(std::move(keys));
}

void RankRigImpl::observe_constructed() {
  const auto& final_groups = dist->optimizer().param_groups();
  obs.final_groups_match = final_groups.size() == installed.size();
  for (size_t g = 0; obs.final_groups_match && g < installed.size(); ++g) {
    const auto& have = final_groups[g].params();
    obs.final_groups_match = have.size() == installed[g].size();
    for (size_t i = 0; obs.final_groups_match && i < have.size(); ++i) {
      obs.final_groups_match =
          have[i].unsafeGetTensorImpl() == installed[g][i].unsafeGetTensorImpl();
    }
  }
  for (const auto& b : buffers) {
    obs.accel_bytes += b->grad_data().nbytes();
    if (b->param_data().defined()) obs.accel_bytes += b->param_data().nbytes();
  }
  const sut::HybridDeviceOptimizer* h = hdo();
  for (size_t g = 0; g < installed.size(); ++g) {
    for (size_t i = 0; i < installed[g].size(); ++i) {
      const torch::Tensor& t = installed[g][i];
      if (!obs.groups[g][i].aliases_model) obs.accel_bytes += t.nbytes();  // fp32 main clone
      if (!h) continue;
      const torch::Tensor inner_t = h->inner_param(t);
      if (h->is_offloaded(t)) {
        ++obs.offloaded_tensors;
        obs.host_bytes += inner_t.nbytes();
      } else if (inner_t.unsafeGetTensorImpl() != t.unsafeGetTensorImpl()) {
        obs.accel_bytes += inner_t.nbytes();  // fp32 copy of a 16-bit shard
      }
    }
  }
}

void RankRigImpl::build(const ParamValues& values) {
  obs.instance = instance;
  obs.rank = rank;
  make_params(values);
  const std::vector<const sut::ParamAndGradBuffer*> buffer_ptrs = make_buffers();
  if (training_loop) ddp_hooks = std::make_unique<sut::DdpGradHooks>(params);
  const std::vector<int> ids = group_ids();
  construct(make_inner_optimizer(ids), buffer_ptrs);
  if (!dist) return;
  set_group_keys(ids);
  observe_constructed();
}

std::vector<float> to_floats(const torch::Tensor& t) {
  torch::Tensor f = t.detach().to(torch::kCPU, torch::kFloat).contiguous().view(-1);
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

RankRig::RankRig(const model::CaseSpec& spec, model::Instance instance, int64_t rank,
                 const sut::Behaviour& behaviour, torch::Device device, uint64_t seed,
                 const StreamSchedule& schedule, bool training_loop)
    : RankRig(spec, instance, rank, behaviour, device, rig::initial_values(spec, seed), schedule,
              training_loop) {}

RankRig::RankRig(const model::CaseSpec& spec, model::Instance instance, int64_t rank,
                 const sut::Behaviour& behaviour, torch::Device device, const ParamValues& initial,
                 const StreamSchedule& schedule, bool training_loop)
    : impl_((keep_large_host_blocks(),
             std::make_unique<RankRigImpl>(spec, instance, rank, behaviour, device, schedule,
                                           training_loop))) {
  if (const auto bad = check_initial_values(spec, initial)) throw std::invalid_argument(*bad);
  impl_->build(initial);
}

std::vector<std::string> RankRig::pageable_copies() const {
  std::vector<std::string> out;
  if (!impl_->simulated) return out;
  const auto& program = impl_->simulated->program();
  for (size_t i = 0; i < program.ops().size(); ++i) {
    const auto& op = program.ops()[i];
    if (!op.host_synchronous) continue;
    std::string where;
    for (const auto& r : op.reads) where += (where.empty() ? "" : ", ") + r.buffer;
    out.push_back("#" + std::to_string(i) + " \"" + op.what + "\" on " +
                  program.stream_name(op.stream) + " from " + where);
  }
  return out;
}

std::vector<std::string> RankRig::stream_races() const {
  return impl_->simulated ? impl_->simulated->race_reports() : std::vector<std::string>{};
}

RankRig::~RankRig() = default;

const RankObservation& RankRig::construction() const { return impl_->obs; }

const std::vector<std::vector<float>>& RankRig::initial_values() const { return impl_->initial; }

void RankRig::step(const model::StepInputs& in) {
  if (impl_->training_loop) {
    step_with_main_grads(in);
  } else {
    impl_->write_grads_and_step(in);
  }
}

void RankRigImpl::write_grads_and_step(const model::StepInputs& in) {
  RankRigImpl& r = *this;
  TORCH_CHECK(r.dist, "RankRig::step: construction failed");
  torch::NoGradGuard no_grad;
  // The forward and backward pass on the current stream: it reads every parameter and leaves
  // the reduce-scatter's result in the main grads (every element holds the DP-reduced gradient).
  std::vector<torch::Tensor> reads, writes, values;
  for (size_t i = 0; i < r.params.size(); ++i) {
    const auto& g = in.grads.at(r.case_index[i]);
    values.push_back(torch::from_blob(const_cast<float*>(g.data()),
                                      {static_cast<int64_t>(g.size())}, torch::kFloat)
                         .clone());
    reads.push_back(r.params[i].param.detach());
    writes.push_back(r.params[i].main_grad);
  }
  r.streams->enqueue(sut::Streams::kCurrent, "forward and backward", reads, writes,
                     [&r, values] {
                       for (size_t i = 0; i < r.params.size(); ++i) {
                         r.params[i].main_grad.view(-1).copy_(values[i]);
                       }
                     });
  // The LR schedule writes lr and weight decay into the optimizer's groups.
  auto& groups = r.dist->optimizer().param_groups();
  std::vector<int> group_ids;
  for (const auto& p : r.c.params) {
    if (p.is_expert == (r.instance == model::Instance::kExpert)) group_ids.push_back(p.group);
  }
  std::sort(group_ids.begin(), group_ids.end());
  group_ids.erase(std::unique(group_ids.begin(), group_ids.end()), group_ids.end());
  for (size_t k = 0; k < groups.size(); ++k) {
    const model::AdamWHyper& h = in.group_hyper.at(group_ids[k]);
    auto& o = groups[k].options();
    if (auto* a = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
      a->lr(h.lr).betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(h.weight_decay);
    } else if (auto* f = dynamic_cast<sut::FusedAdamOptions*>(&o)) {
      f->lr(h.lr).beta1(h.beta1).beta2(h.beta2).eps(h.eps).weight_decay(h.weight_decay);
    } else {
      auto& hd = static_cast<sut::HdoOptions&>(o);
      hd.lr(h.lr).beta1(h.beta1).beta2(h.beta2).eps(h.eps).weight_decay(h.weight_decay);
    }
  }
  r.group_found_inf = false;
  for (size_t i = 0; i < r.params.size(); ++i) {
    const torch::Tensor in_buffer = values[i].to(r.params[i].main_grad.scalar_type());
    r.group_found_inf = r.group_found_inf || !torch::isfinite(in_buffer).all().item<bool>();
  }
  if (r.grad_stats) {
    const sut::GradScaler* scaler = r.dist->grad_scaler();
    r.grad_stats->begin_step(in.grads, scaler ? scaler->inv_scale().cpu().item<float>() : 1.0f);
  }
  r.last = StepReport{};  // a step that raises reports nothing
  const sut::StepResult result = r.dist->step();
  r.last = StepReport{result.success, result.grad_norm, result.num_zeros_in_grad};
}

void RankRig::use_grad_stats(double clip_grad, bool log_num_zeros_in_grad) {
  RankRigImpl& r = *impl_;
  TORCH_CHECK(r.dist, "RankRig::use_grad_stats: construction failed");
  r.grad_stats = std::make_unique<GradStatsGroupSim>(r.c, r.instance, r.rank, clip_grad,
                                                     r.device);
  GradStatsGroupSim* group = r.grad_stats.get();
  r.dist->set_grad_stats(clip_grad, log_num_zeros_in_grad,
                         [group](torch::Tensor& t) { group->all_reduce_sum(t); });
}

StepReport RankRig::last_step() const {
  impl_->drain();
  return impl_->last;
}

void RankRig::use_grad_scaler(const model::GradScalerConfig& config) {
  RankRigImpl& r = *impl_;
  TORCH_CHECK(r.dist, "RankRig::use_grad_scaler: construction failed");
  r.dist->set_grad_scaler(make_grad_scaler(config, r.device, r.behaviour),
                          [&r](bool local) { return local || r.group_found_inf; });
}

std::optional<model::GradScalerState> RankRig::grad_scaler_state() const {
  const sut::GradScaler* s = impl_->dist ? impl_->dist->grad_scaler() : nullptr;
  if (!s) return std::nullopt;
  impl_->drain();
  model::GradScalerState out;
  out.scale = s->scale().cpu().item<float>();
  if (const auto* d = dynamic_cast<const sut::DynamicGradScaler*>(s)) {
    out.growth_tracker = d->growth_tracker();
    out.hysteresis_tracker = d->hysteresis_tracker();
  }
  return out;
}

void RankRig::set_model_values(const std::vector<std::vector<float>>& values) {
  impl_->drain();
  torch::NoGradGuard no_grad;
  TORCH_CHECK(values.size() == impl_->params.size(), "one value vector per parameter");
  for (size_t i = 0; i < values.size(); ++i) {
    torch::Tensor& p = impl_->params[i].param;
    p.detach().view(-1).copy_(torch::tensor(values[i]).to(p.device(), p.scalar_type()));
  }
}

void RankRig::zero_grad(bool set_to_none) {
  impl_->drain();
  TORCH_CHECK(impl_->dist, "RankRig::zero_grad: construction failed");
  if (impl_->training_loop) {
    sut::zero_grad_buffer(impl_->params, buffers(), impl_->behaviour);
  }
  impl_->dist->zero_grad(set_to_none);
}

void RankRig::reload_model_params() {
  impl_->drain();
  TORCH_CHECK(impl_->dist, "RankRig::reload_model_params: construction failed");
  impl_->dist->reload_model_params();
}

std::vector<float> RankRig::model_piece(size_t g, size_t i) const {
  impl_->drain();
  const RankRigImpl& r = *impl_;
  const int p = r.installed_param[g][i];
  const auto& range = r.dist->ranges_of(p).param;
  return to_floats(r.params[p].param.detach().view(-1).slice(0, range.start, range.end));
}

std::vector<float> RankRig::optimizer_piece(size_t g, size_t i) const {
  impl_->drain();
  const RankRigImpl& r = *impl_;
  const torch::Tensor& t = r.installed[g][i];
  if (const auto* h = r.hdo()) return to_floats(h->inner_param(t));
  if (const auto* f = r.fused()) return to_floats(f->master_of(t));
  return to_floats(t);
}

ObservedState RankRig::state(size_t g, size_t i) const {
  impl_->drain();
  const RankRigImpl& r = *impl_;
  const torch::Tensor& t = r.installed[g][i];
  ObservedState out;
  if (const auto* h = r.hdo()) {
    const sut::HdoParamState* s = h->state_of(t);
    if (!s) return out;
    out = ObservedState{to_floats(s->exp_avg), to_floats(s->exp_avg_sq),
                        to_floats(s->master_param), s->step, true};
    return out;
  }
  if (const auto* f = r.fused()) {
    const sut::FusedAdamState* s = f->state_of(t);
    if (!s) return out;
    const auto& groups = f->param_groups();
    return ObservedState{to_floats(s->exp_avg()), to_floats(s->exp_avg_sq()),
                         to_floats(f->master_of(t)),
                         static_cast<const sut::FusedAdamOptions&>(groups.at(g).options()).step(),
                         true};
  }
  const auto& state = r.dist->optimizer().state();
  auto it = state.find(sc::sut::optim_state_key(t));
  if (it == state.end()) return out;
  const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  return ObservedState{to_floats(s.exp_avg()), to_floats(s.exp_avg_sq()), to_floats(t), s.step(),
                       true};
}

ObservedPlacement RankRig::placement(size_t g, size_t i) const {
  const RankRigImpl& r = *impl_;
  ObservedPlacement out;
  const auto* h = r.hdo();
  if (!h) return out;
  const torch::Tensor& t = r.installed[g][i];
  out.offloaded = h->is_offloaded(t);
  out.fp32_copy = h->has_fp32_copy(t);
  const torch::Tensor inner = h->inner_param(t);
  out.host_pinned = out.offloaded && inner.is_pinned();
  out.cpu_optimizer = h->cpu_optimizer_index(t);
  out.stepped_on_host = h->on_host(inner);
  for (const auto& [name, v] : h->state_tensors(t)) {
    if (name != "step") out.state_on_host[name] = h->on_host(v);  // the port's step is a count
  }
  return out;
}

uint64_t RankRig::digest() const { return state_digest(*this); }

int RankRig::num_cpu_optimizers() const {
  const auto* h = impl_->hdo();
  return h ? static_cast<int>(h->num_cpu_optimizers()) : 0;
}

bool RankRig::has_accelerator_optimizer() const {
  const auto* h = impl_->hdo();
  return h && h->has_gpu_optimizer();
}

RankObservation run_rank(const model::CaseSpec& spec, model::Instance instance, int64_t rank,
                         const sut::Behaviour& behaviour, torch::Device device, uint64_t seed) {
  return RankRig(spec, instance, rank, behaviour, device, seed).construction();
}


// --- Accessors for the multi-process mode ---

std::vector<const sut::ParamAndGradBuffer*> RankRig::buffers() const {
  std::vector<const sut::ParamAndGradBuffer*> out;
  for (const auto& b : impl_->buffers) out.push_back(b.get());
  return out;
}

void RankRig::write_main_grads(const std::vector<std::vector<float>>& grads) {
  impl_->drain();
  RankRigImpl& r = *impl_;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < r.params.size(); ++i) {
    const auto& g = grads.at(r.case_index[i]);
    TORCH_CHECK(static_cast<int64_t>(g.size()) == r.params[i].main_grad.numel(),
                "write_main_grads: wrong gradient size for ", r.params[i].name);
    torch::Tensor src = torch::from_blob(const_cast<float*>(g.data()),
                                         {static_cast<int64_t>(g.size())}, torch::kFloat);
    r.params[i].main_grad.view(-1).copy_(src);
  }
}

void RankRig::step_with_main_grads(const model::StepInputs& in) {
  // step() writes its grads into the main grads first: hand it what they hold now, so that the
  // write changes nothing and the optimizer reads the reduce-scatter's result.
  model::StepInputs now;
  now.group_hyper = in.group_hyper;
  now.grads.resize(impl_->c.params.size());
  for (size_t i = 0; i < impl_->params.size(); ++i) {
    now.grads[impl_->case_index[i]] = to_floats(impl_->params[i].main_grad);
  }
  impl_->write_grads_and_step(now);
}

std::vector<std::vector<float>> RankRig::model_values() const {
  impl_->drain();
  std::vector<std::vector<float>> out;
  for (const auto& mp : impl_->params) out.push_back(to_floats(mp.param));
  return out;
}

}  // namespace sc::rig
