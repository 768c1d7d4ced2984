#include "sim/world.h"

#include <algorithm>
#include <memory>

#include "sim/rng.h"
#include "sim/sut/distrib_optimizer.h"
#include "sim/sut/hybrid_optimizer.h"
#include "sim/sut/param_buffer.h"

namespace sc::sim {

model::DType to_model_dtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return model::DType::kFloat32;
    case torch::kBFloat16:
      return model::DType::kBFloat16;
    case torch::kHalf:
      return model::DType::kFloat16;
    default:
      return model::DType::kFloat64;
  }
}

torch::ScalarType to_torch_dtype(model::DType d) {
  switch (d) {
    case model::DType::kFloat32:
      return torch::kFloat;
    case model::DType::kBFloat16:
      return torch::kBFloat16;
    case model::DType::kFloat16:
      return torch::kHalf;
    case model::DType::kFloat64:
      return torch::kDouble;
  }
  return torch::kFloat;
}

namespace {

// Weight decay of group g: even groups decay, odd groups (the "no-decay" ones) do not.
double group_weight_decay(int g) { return g % 2 == 0 ? 0.1 : 0.0; }

torch::Tensor make_param(const model::ParamSpec& spec, torch::Device device, SplitMix64& rng) {
  std::vector<float> values(static_cast<size_t>(spec.numel()));
  for (float& v : values) v = rng.symmetric_unit();
  torch::Tensor host = torch::from_blob(values.data(), {spec.numel()}, torch::kFloat).clone();
  return host.view(spec.shape).to(device, to_torch_dtype(spec.dtype)).requires_grad_(true);
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

RankObservation run_rank(const model::CaseSpec& c, model::Instance instance, int64_t rank,
                         const sut::Behaviour& behaviour, torch::Device device, uint64_t seed) {
  RankObservation obs;
  obs.instance = instance;
  obs.rank = rank;
  const bool expert = instance == model::Instance::kExpert;
  const int64_t dp = model::instance_dp(c, instance);

  // The instance's parameters; every rank draws the same values from the seed.
  SplitMix64 rng(seed);
  std::vector<sut::ModelParam> params;
  std::vector<int> case_index;
  for (int i = 0; i < static_cast<int>(c.params.size()); ++i) {
    const model::ParamSpec& spec = c.params[i];
    torch::Tensor t = make_param(spec, device, rng);
    if (spec.is_expert != expert) continue;
    sut::ModelParam mp;
    mp.name = spec.name;
    mp.param = t;
    mp.shared_embedding = spec.shared_embedding;
    mp.allreduce = !spec.is_expert;
    params.push_back(std::move(mp));
    case_index.push_back(i);
  }

  sut::DdpConfig ddp;
  ddp.grad_reduce_in_fp32 = c.grad_reduce_in_fp32;
  ddp.pad_buckets_for_high_nccl_busbw = c.pad_for_high_nccl_busbw;
  ddp.bucket_size = c.bucket_size;
  std::vector<std::unique_ptr<sut::ParamAndGradBuffer>> buffers;
  std::vector<const sut::ParamAndGradBuffer*> buffer_ptrs;
  std::map<int, std::vector<int>> chunks;  // model chunk -> its params, ascending chunks
  for (size_t i = 0; i < params.size(); ++i) {
    chunks[c.params[case_index[i]].chunk].push_back(static_cast<int>(i));
  }
  for (const auto& [chunk, members] : chunks) {
    (void)chunk;
    for (auto& [key, in_buffer] :
         sut::group_params_for_buffers(params, members, ddp.grad_reduce_in_fp32)) {
      buffers.push_back(std::make_unique<sut::ParamAndGradBuffer>(ddp, key, params, in_buffer, dp,
                                                                  rank, device));
      buffer_ptrs.push_back(buffers.back().get());
    }
  }

  // The inner optimizer over the full model params, one group per distinct group index.
  std::vector<int> group_ids;
  for (const model::ParamSpec& p : c.params) {
    if (p.is_expert == expert) group_ids.push_back(p.group);
  }
  std::sort(group_ids.begin(), group_ids.end());
  group_ids.erase(std::unique(group_ids.begin(), group_ids.end()), group_ids.end());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (int g : group_ids) {
    std::vector<torch::Tensor> members;
    for (size_t i = 0; i < params.size(); ++i) {
      if (c.params[case_index[i]].group == g) members.push_back(params[i].param);
    }
    if (c.cpu_offload) {
      sut::HdoOptions o;
      o.weight_decay(group_weight_decay(g));
      groups.emplace_back(members, std::make_unique<sut::HdoOptions>(o));
    } else {
      groups.emplace_back(members, std::make_unique<torch::optim::AdamWOptions>(
                                       torch::optim::AdamWOptions(1e-3).weight_decay(
                                           group_weight_decay(g))));
    }
  }
  std::unique_ptr<torch::optim::Optimizer> inner;
  if (c.cpu_offload) {
    sut::HdoOptions defaults;
    defaults.offload_fraction(c.offload_fraction).param_update_in_fp32(true);
    inner = std::make_unique<sut::HybridDeviceOptimizer>(std::move(groups), defaults, device);
  } else {
    inner = std::make_unique<torch::optim::AdamW>(std::move(groups));
  }

  sut::OptimizerConfig config;
  config.use_precision_aware_optimizer_no_fp8_or_ds_fp8 = c.precision_aware;
  std::vector<std::vector<torch::Tensor>> installed;
  auto probe = [&](const sut::DistributedOptimizer& d) {
    for (const sut::GbufRangeMap& map : d.gbuf_ranges()) {
      model::BufferRanges br{model::BufferKey{to_model_dtype(map.param_dtype),
                                              to_model_dtype(map.grad_dtype), expert},
                             {}};
      for (const sut::BucketRangeMap& b : map.buckets) {
        model::BucketRanges mb{to_model(b.gbuf_world), {}};
        for (const auto& [p, r] : b.param_map) {
          mb.param_map.push_back(model::ParamRanges{case_index[p], to_model(r.gbuf_world),
                                                    to_model(r.gbuf_world_in_bucket),
                                                    to_model(r.gbuf_local), to_model(r.param)});
        }
        br.buckets.push_back(std::move(mb));
      }
      obs.ranges.push_back(std::move(br));
    }
    for (size_t g = 0; g < d.opt_group_ranges().size(); ++g) {
      std::vector<int> order = d.model_fp32_groups()[g];
      order.insert(order.end(), d.model_float16_groups()[g].begin(),
                   d.model_float16_groups()[g].end());
      const auto& tensors = d.installed(g);
      std::vector<ObservedTensor> group;
      for (size_t i = 0; i < tensors.size(); ++i) {
        group.push_back(observe(tensors[i], case_index[order[i]], params[order[i]]));
      }
      obs.groups.push_back(std::move(group));
      installed.push_back(tensors);
    }
    for (const auto& [p, where] : d.model_param_group_index_map()) {
      obs.index_map[case_index[p]] = where;
    }
  };

  try {
    sut::DistributedOptimizer dist(std::move(inner), config, params, buffer_ptrs, behaviour,
                                   device, probe);
    const auto& final_groups = dist.optimizer().param_groups();
    obs.final_groups_match = final_groups.size() == installed.size();
    for (size_t g = 0; obs.final_groups_match && g < installed.size(); ++g) {
      const auto& have = final_groups[g].params();
      obs.final_groups_match = have.size() == installed[g].size();
      for (size_t i = 0; obs.final_groups_match && i < have.size(); ++i) {
        obs.final_groups_match = have[i].unsafeGetTensorImpl() == installed[g][i].unsafeGetTensorImpl();
      }
    }
    for (const auto& b : buffers) {
      obs.accel_bytes += b->grad_data().nbytes();
      if (b->param_data().defined()) obs.accel_bytes += b->param_data().nbytes();
    }
    const auto* hdo = dynamic_cast<const sut::HybridDeviceOptimizer*>(&dist.optimizer());
    for (size_t g = 0; g < installed.size(); ++g) {
      for (size_t i = 0; i < installed[g].size(); ++i) {
        const torch::Tensor& t = installed[g][i];
        if (!obs.groups[g][i].aliases_model) obs.accel_bytes += t.nbytes();  // fp32 main clone
        if (!hdo) continue;
        const torch::Tensor inner = hdo->inner_param(t);
        if (hdo->is_offloaded(t)) {
          ++obs.offloaded_tensors;
          obs.host_bytes += inner.nbytes();
        } else if (inner.unsafeGetTensorImpl() != t.unsafeGetTensorImpl()) {
          obs.accel_bytes += inner.nbytes();  // fp32 copy of a 16-bit shard
        }
      }
    }
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
  return obs;
}

}  // namespace sc::sim
