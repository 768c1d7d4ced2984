// build_rank(): the seam's one entry, choosing the system under test by target.
#include <stdexcept>

#include "sim/rig/megatron_rank.h"
#include "sim/rig/rank_rig.h"
#include "sim/rig/rank_under_test.h"

namespace sc::rig {

std::unique_ptr<RankUnderTest> build_rank(const Target& target, const model::CaseSpec& spec,
                                          model::Instance instance, int64_t rank, uint64_t seed,
                                          const StreamSchedule& schedule) {
  return build_rank(target, spec, instance, rank, initial_values(spec, seed), schedule);
}

std::unique_ptr<RankUnderTest> build_rank(const Target& target, const model::CaseSpec& spec,
                                          model::Instance instance, int64_t rank,
                                          const ParamValues& initial,
                                          const StreamSchedule& schedule) {
  if (!target.megatron) {
    return std::make_unique<RankRig>(spec, instance, rank, target.behaviour, target.device,
                                     initial, schedule, target.training_loop);
  }
  // The real code's streams are checked by the worker's stream-order checker on the host
  // stand-in; on CUDA they are real streams, whose order nothing here records.
  if (schedule.simulate && target.device.is_cuda()) {
    throw NotRunAgainstRealCode("on CUDA the real code runs real streams: its stream order is "
                                "checked on the host stand-in (--device cpu) only");
  }
  // The worker's device layer runs streams in program order: no other order can be chosen.
  if (schedule.simulate && schedule.policy != model::streams::Policy::kEager) {
    not_served_by_real_code(Capability::kChosenStreamOrder);
  }
  MegatronTarget where = *target.megatron;
  where.cuda = target.device.is_cuda();
  return make_megatron_rank(where, spec, instance, rank, initial, schedule.simulate,
                            target.training_loop);
}

double group_weight_decay(int group) { return group % 2 == 0 ? 0.1 : 0.0; }

uint64_t state_digest(const RankUnderTest& rank) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t k = 0; k < bytes; ++k) h = (h ^ p[k]) * 0x100000001b3ull;
  };
  auto mix_floats = [&](const std::vector<float>& v) { mix(v.data(), v.size() * sizeof(float)); };
  const RankObservation& obs = rank.construction();
  if (obs.error) return h;
  for (size_t g = 0; g < obs.groups.size(); ++g) {
    for (size_t i = 0; i < obs.groups[g].size(); ++i) {
      mix_floats(rank.model_piece(g, i));
      mix_floats(rank.optimizer_piece(g, i));
      const ObservedState s = rank.state(g, i);
      mix_floats(s.exp_avg);
      mix_floats(s.exp_avg_sq);
      mix(&s.step, sizeof s.step);
    }
  }
  return h;
}

std::vector<Checkpoint> save_distributed(const std::vector<const RankUnderTest*>& group) {
  std::vector<Checkpoint> out;
  for (const RankUnderTest* r : group) {
    out.push_back(r->save_distributed(out.empty() ? nullptr : &out.front()));
  }
  return out;
}

GatheredCheckpoint save_gathered(const std::vector<const RankUnderTest*>& group,
                                 GatheredFormat format) {
  std::vector<const RankRig*> ranks;
  for (const RankUnderTest* r : group) {
    const auto* rig = dynamic_cast<const RankRig*>(r);
    if (rig == nullptr) {
      gathered_checkpoints_need_real_ranks();
    }
    ranks.push_back(rig);
  }
  return RankRig::save_gathered(ranks, format);
}

}  // namespace sc::rig
