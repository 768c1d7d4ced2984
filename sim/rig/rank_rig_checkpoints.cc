// The rig's checkpoints: the optimizer's own state dict (save, load), the distributed
// checkpoint's model-space load, and the gathered formats. The rest of the rig is rank_rig.cc.
#include "sim/rig/rank_rig.h"
#include "sim/rig/rank_rig_impl.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "sim/port/distrib_optimizer.h"
#include "sim/port/hybrid_optimizer.h"
#include "sim/port/optim_state.h"

namespace sc::rig {

struct CheckpointImpl {
  std::vector<torch::Tensor> weights;                   // per port param
  std::vector<std::vector<torch::Tensor>> main_params;  // shard_fp32_from_float16 groups
  sut::HdoStateDict hdo;                                // hybrid optimizer only
  sut::DistOptStateDict dist;                           // DistributedOptimizer.state_dict()
  std::vector<sut::ParamStateTensors> param_state;      // fs_model_space tensors, copies
  std::string dist_error;  // what saving the distributed checkpoint raised, if anything
};

Checkpoint RankRig::save() const {
  impl_->drain();
  const RankRigImpl& r = *impl_;
  TORCH_CHECK(r.dist, "RankRig::save: construction failed");
  auto ck = std::make_shared<CheckpointImpl>();
  for (const auto& mp : r.params) ck->weights.push_back(mp.param.detach().clone());
  for (const auto& g : r.dist->shard_fp32_from_float16_groups()) {
    std::vector<torch::Tensor> copies;
    for (const auto& t : g) copies.push_back(t.defined() ? t.detach().clone() : torch::Tensor());
    ck->main_params.push_back(std::move(copies));
  }
  if (r.hdo()) ck->hdo = r.hdo()->state_dict();
  // The distributed checkpoint's part: what Megatron raises here (e.g. before the first step) is
  // kept and raised again by load_distributed; the hybrid optimizer's own save still works.
  try {
    ck->dist = r.dist->state_dict();
    for (const auto& t : r.dist->param_state_fs_model_space()) {
      sut::ParamStateTensors copy;
      for (const auto& [k, v] : t) copy[k] = v.detach().clone();
      ck->param_state.push_back(std::move(copy));
    }
  } catch (const c10::Error& e) {
    ck->dist_error = e.msg();
  }
  return Checkpoint{ck, nullptr};
}

void RankRig::load(const Checkpoint& ck, bool map_to_host) {
  impl_->drain();
  RankRigImpl& r = *impl_;
  auto* hdo = const_cast<sut::HybridDeviceOptimizer*>(r.hdo());
  TORCH_CHECK(hdo, "RankRig::load: only the hybrid optimizer's state is loaded");
  TORCH_CHECK(ck.impl, "RankRig::load: a checkpoint of another system under test");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < r.params.size(); ++i) r.params[i].param.detach().copy_(ck.impl->weights[i]);
  const auto& mains = r.dist->shard_fp32_from_float16_groups();
  for (size_t g = 0; g < mains.size(); ++g) {
    for (size_t i = 0; i < mains[g].size(); ++i) {
      if (mains[g][i].defined()) mains[g][i].detach().copy_(ck.impl->main_params[g][i]);
    }
  }
  hdo->load_state_dict(map_to_host ? hdo->mapped_to_host(ck.impl->hdo) : ck.impl->hdo);
}

void RankRig::load_distributed(const Checkpoint& ck) {
  impl_->drain();
  RankRigImpl& r = *impl_;
  TORCH_CHECK(r.dist, "RankRig::load_distributed: construction failed");
  TORCH_CHECK(ck.impl, "RankRig::load_distributed: a checkpoint of another system under test");
  TORCH_CHECK(ck.impl->dist_error.empty(), ck.impl->dist_error);
  constexpr uint64_t kDummyStepSeed = 17;
  // sharded_state_dict(is_loading=True).
  r.dist->load_state_dict(r.dist->state_dict(), kDummyStepSeed);
  std::vector<sut::ParamStateTensors> live = r.dist->param_state_fs_model_space();
  // dist_checkpointing.load: every linked tensor filled in place; "step" is a plain entry and
  // comes back as saved.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < r.params.size(); ++i) r.params[i].param.detach().copy_(ck.impl->weights[i]);
  TORCH_CHECK(live.size() == ck.impl->param_state.size(),
              "checkpoint holds the state of ", ck.impl->param_state.size(), " params, not ",
              live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    for (auto& [k, v] : live[i]) {
      auto it = ck.impl->param_state[i].find(k);
      TORCH_CHECK(it != ck.impl->param_state[i].end(), "checkpoint lacks optimizer state '", k,
                  "' of local param ", i);
      if (k == "step") {
        v = it->second.clone();
      } else {
        v.copy_(it->second);
      }
    }
  }
  sut::DistOptStateDict sd = ck.impl->dist;
  sut::ParamStateDict state;
  state.sharding = sut::ParamStateDict::Sharding::kFullyShardedModelSpace;
  state.fs_model_space = std::move(live);
  sd.param_state = std::move(state);
  r.dist->load_state_dict(sd, kDummyStepSeed);
}

std::vector<model::AdamWHyper> RankRig::group_hyper_parameters() const {
  TORCH_CHECK(impl_->dist, "RankRig::group_hyper_parameters: construction failed");
  std::vector<model::AdamWHyper> out;
  for (const sut::SavedGroup& g : impl_->dist->group_hyper_parameters()) {
    out.push_back(model::AdamWHyper{g.lr, g.beta1, g.beta2, g.eps, g.weight_decay});
  }
  return out;
}

void RankRig::add_non_tensor_state(std::vector<std::string> keys) {
  TORCH_CHECK(impl_->dist, "RankRig::add_non_tensor_state: construction failed");
  impl_->dist->add_non_tensor_state(std::move(keys));
}

const char* format_name(GatheredFormat format) {
  return format == GatheredFormat::kDpZero ? "dp_zero_gather_scatter" : "fully_reshardable";
}

struct GatheredCheckpointImpl {
  GatheredFormat format;
  std::map<int, torch::Tensor> weights;  // per case param
  sut::DistOptStateDict dist;            // DP rank 0's DistributedOptimizer.state_dict()
  sut::DpZeroState world;                // dp_zero_gather_scatter
  std::map<int, sut::ParamStateTensors> model_space;  // fully_reshardable, per case param
  std::string error;  // what saving raised, if anything
};

GatheredCheckpoint RankRig::save_gathered(const std::vector<const RankRig*>& group,
                                          GatheredFormat format) {
  TORCH_CHECK(!group.empty(), "RankRig::save_gathered: an empty DP group");
  auto ck = std::make_shared<GatheredCheckpointImpl>();
  ck->format = format;
  std::vector<const sut::DistributedOptimizer*> dists;
  for (const RankRig* rig : group) {
    rig->impl_->drain();
    TORCH_CHECK(rig->impl_->dist, "RankRig::save_gathered: construction failed");
    dists.push_back(rig->impl_->dist.get());
  }
  const RankRigImpl& zero = *group.front()->impl_;
  for (size_t i = 0; i < zero.params.size(); ++i) {
    ck->weights[zero.case_index[i]] = zero.params[i].param.detach().clone();
  }
  // The model weights as the param all-gather leaves them: each rank's owned pieces.
  for (const RankRig* rig : group) {
    const RankRigImpl& r = *rig->impl_;
    for (const sut::GbufRangeMap& gbuf : r.dist->gbuf_ranges()) {
      for (const sut::BucketRangeMap& bucket : gbuf.buckets) {
        for (const auto& [param, ranges] : bucket.param_map) {
          ck->weights.at(r.case_index[param])
              .view(-1)
              .slice(0, ranges.param.start, ranges.param.end)
              .copy_(r.params[param].param.detach().view(-1).slice(0, ranges.param.start,
                                                                     ranges.param.end));
        }
      }
    }
  }
  try {
    ck->dist = zero.dist->state_dict();
    ck->world = sut::gather_parameter_state_dp_zero(dists);
    if (format == GatheredFormat::kFullyReshardable) {
      for (const auto& e : zero.dist->sharded_param_state_fully_reshardable(ck->world)) {
        sut::ParamStateTensors copy;
        for (const auto& [k, v] : e.tensors) copy[k] = v.clone();
        ck->model_space[zero.case_index[e.param]] = std::move(copy);
      }
      ck->world.clear();
    }
  } catch (const c10::Error& e) {
    ck->error = e.msg();
  }
  return GatheredCheckpoint{ck};
}

void RankRig::load_gathered(const GatheredCheckpoint& ck) {
  impl_->drain();
  RankRigImpl& r = *impl_;
  TORCH_CHECK(r.dist, "RankRig::load_gathered: construction failed");
  TORCH_CHECK(ck.impl->error.empty(), ck.impl->error);
  constexpr uint64_t kDummyStepSeed = 17;
  r.dist->load_state_dict(r.dist->state_dict(), kDummyStepSeed);  // sharded_state_dict
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < r.params.size(); ++i) {
    r.params[i].param.detach().copy_(ck.impl->weights.at(r.case_index[i]));
  }
  sut::DistOptStateDict sd = ck.impl->dist;
  sut::ParamStateDict state;
  if (ck.impl->format == GatheredFormat::kDpZero) {
    state.sharding = sut::ParamStateDict::Sharding::kDpZero;
    state.dp_zero = ck.impl->world;
  } else {
    state.sharding = sut::ParamStateDict::Sharding::kFullyReshardable;
    for (const sut::ParamAndGradBuffer* buffer : r.dist->buffers()) {
      for (const auto& entry : buffer->layout().param_index_map) {
        const int param = r.case_index.at(std::get<0>(entry));
        auto it = ck.impl->model_space.find(param);
        TORCH_CHECK(it != ck.impl->model_space.end(), "checkpoint lacks the state of param ",
                    r.c.params.at(param).name);
        state.fully_reshardable.push_back(it->second);
      }
    }
  }
  sd.param_state = std::move(state);
  r.dist->load_state_dict(sd, kDummyStepSeed);
}

}  // namespace sc::rig
