// The distributed optimizer's checkpoints: state_dict / load_state_dict, the per-parameter
// state of the dp-reshardable and model-space formats, and the gathered formats
// ("dp_zero_gather_scatter", "fully_reshardable"). Construction and the step are
// distrib_optimizer.cc.
#include "sim/port/distrib_optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "sim/port/device.h"
#include "sim/port/fused_adam.h"
#include "sim/port/hybrid_optimizer.h"
#include "sim/port/optim_state.h"

namespace sc::sut {

// distrib_optimizer.py ~836-1241.

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
