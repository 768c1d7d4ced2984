#include "properties/real_ranks_props.h"

#include <rapidcheck.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/layout.h"
#include "model/shard.h"
#include "model/training.h"
#include "properties/coverage.h"
#include "properties/rank_checks.h"
#include "properties/real_code_props.h"
#include "properties/support.h"
#include "sim/rig/grad_parts.h"
#include "sim/rig/megatron_rank.h"
#include "sim/rig/megatron_world.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

namespace {

using Difference = std::optional<std::string>;
using Ranks = std::vector<std::unique_ptr<rig::RankUnderTest>>;
using Grads = std::vector<std::vector<float>>;  // per case parameter

std::string rank_name(model::Instance inst, int64_t r) {
  return std::string(inst == model::Instance::kExpert ? "expert" : "dense") + " rank " +
         std::to_string(r);
}

// One instance's ranks on the three sides: `real` by world rank, the others by the instance's
// rank. With expert parallelism ep, world rank g holds expert rank g / ep of expert-parallel
// rank g % ep (sim/megatron/world.py); every expert-parallel rank's experts are the case's.
struct Sides {
  model::Instance inst = model::Instance::kDense;
  int64_t ep = 1;  // expert parallelism for the expert instance, 1 for the dense one
  Ranks real, emulated, port;
  int64_t rank_of(size_t world_rank) const { return static_cast<int64_t>(world_rank) / ep; }
  std::string name(size_t world_rank) const {
    return rank_name(inst, rank_of(world_rank)) +
           (ep > 1 ? " (world rank " + std::to_string(world_rank) + ")" : "");
  }
};

// The gradient that instance rank `r` of `ranks` delivers so that DDP's 1/dp scaling (the dense
// dp, for experts too) and the SUM reduce-scatter over its group give back `grads`; nothing
// when a part does not fit its parameter's dtype (an fp16 part times dp past 65504).
std::optional<Grads> rank_grads(const model::CaseSpec& spec, const Grads& grads, int64_t r,
                                int64_t ranks) {
  Grads out(grads.size());
  for (size_t p = 0; p < grads.size(); ++p) {
    for (const float g : grads[p]) {
      const float part = rig::grad_part(g, static_cast<int>(r), static_cast<int>(ranks)) *
                         static_cast<float>(spec.dp);
      const float delivered = model::backward_grad(spec.params[p].dtype, part);
      if (std::memcmp(&delivered, &part, sizeof part) != 0) return std::nullopt;
      out[p].push_back(part);
    }
  }
  return out;
}

int64_t instance_ranks(const model::CaseSpec& spec, model::Instance inst) {
  return inst == model::Instance::kExpert ? spec.expert_dp : spec.dp;
}

// Every rank of `inst` on the three sides (without `emulated`, on the real ranks and the port
// only), from `initial`.
Sides build(const model::CaseSpec& spec, model::Instance inst, const sut::Behaviour& b,
            const rig::MegatronTarget& tree, rig::MegatronWorld& world,
            const rig::ParamValues& initial, bool emulated = true) {
  Sides s;
  s.inst = inst;
  s.ep = spec.dp / instance_ranks(spec, inst);
  s.real.resize(static_cast<size_t>(spec.dp));
  world.on_every_rank([&](int g) {
    const auto at = static_cast<size_t>(g);
    s.real[at] = rig::make_megatron_rank(world.worker(g), spec, inst, s.rank_of(at), initial,
                                         /*check_stream_order=*/false, /*training_loop=*/true);
  });
  for (int64_t r = 0; r < instance_ranks(spec, inst); ++r) {
    if (emulated) {
      s.emulated.push_back(
          rig::build_rank(rig::Target{b, device(), tree, true}, spec, inst, r, initial));
    }
    s.port.push_back(
        rig::build_rank(rig::Target{b, device(), std::nullopt, true}, spec, inst, r, initial));
  }
  return s;
}

Difference constructions(const Sides& s) {
  for (size_t g = 0; g < s.real.size(); ++g) {
    const auto& emulated = *s.emulated[static_cast<size_t>(s.rank_of(g))];
    if (auto d = construction_difference(emulated.construction(), s.real[g]->construction())) {
      return s.name(g) +
             ", construction, one-process emulation (\"port\" below) vs real ranks: " + *d;
    }
  }
  for (size_t r = 0; r < s.port.size(); ++r) {
    if (auto d =
            construction_difference(s.port[r]->construction(), s.emulated[r]->construction())) {
      return rank_name(s.inst, static_cast<int64_t>(r)) +
             ", construction, port vs one-process emulation (\"real code\" below): " + *d;
    }
  }
  return std::nullopt;
}

// Each case parameter's position among the instance's parameters (-1 for the other instance's).
std::vector<int> local_positions(const model::CaseSpec& spec, model::Instance inst) {
  std::vector<int> out;
  int next = 0;
  for (const auto& p : spec.params) {
    out.push_back(p.is_expert == (inst == model::Instance::kExpert) ? next++ : -1);
  }
  return out;
}

// On each owned piece of instance rank `r`, the parameters `gathered` (a real rank's) hold what
// the emulated rank stepped to.
Difference owned_pieces(const model::CaseSpec& spec,
                        const std::vector<model::BufferLayout>& layouts, const Sides& s,
                        const std::vector<std::vector<float>>& gathered, int64_t r) {
  const auto local = local_positions(spec, s.inst);
  const auto plan = model::plan_rank(spec, layouts, s.inst, r);
  const auto stepped = s.emulated[static_cast<size_t>(r)]->model_values();
  for (const auto& group : plan.groups) {
    for (const auto& e : group.installed) {
      const size_t p = static_cast<size_t>(local.at(static_cast<size_t>(e.param)));
      const auto first = static_cast<std::ptrdiff_t>(e.param_range.start);
      const auto last = static_cast<std::ptrdiff_t>(e.param_range.end);
      const std::vector<float> a(gathered.at(p).begin() + first, gathered.at(p).begin() + last);
      const std::vector<float> b(stepped.at(p).begin() + first, stepped.at(p).begin() + last);
      const std::string what = spec.params[static_cast<size_t>(e.param)].name + "[" +
                               std::to_string(first) + ", " + std::to_string(last) +
                               "), owned by " + rank_name(s.inst, r) +
                               " (the real ranks gathered, its emulated rank stepped to)";
      if (auto v = compare_exact(a, b, what)) return v;
    }
  }
  return std::nullopt;
}

// Every real rank's full parameters equal those of the first rank of its data-parallel group
// (world rank g % ep), and on each rank's owned pieces the values its emulated rank stepped to.
Difference full_params(const model::CaseSpec& spec, const std::vector<model::BufferLayout>& layouts,
                       const Sides& s) {
  std::vector<std::vector<std::vector<float>>> values;
  for (const auto& rank : s.real) values.push_back(rank->model_values());
  for (size_t g = 0; g < values.size(); ++g) {
    const size_t first = g % static_cast<size_t>(s.ep);
    if (values[g] != values[first]) {  // NaN != NaN: a NaN fails, read it off the log
      return s.name(g) + ": its full parameters differ from those of " + s.name(first) +
             " after the param all-gather";
    }
  }
  for (int64_t r = 0; r < static_cast<int64_t>(s.emulated.size()); ++r) {
    if (auto d = owned_pieces(spec, layouts, s, values[static_cast<size_t>(r * s.ep)], r)) {
      return d;
    }
  }
  return std::nullopt;
}

Difference holdings(const model::CaseSpec& spec, const std::vector<model::BufferLayout>& layouts,
                    const Sides& s) {
  for (size_t g = 0; g < s.real.size(); ++g) {
    const auto& emulated = *s.emulated[static_cast<size_t>(s.rank_of(g))];
    if (auto d = holding_difference(emulated, *s.real[g], /*with_model_values=*/false)) {
      return s.name(g) + ", one-process emulation (\"port\" below) vs real ranks: " + *d;
    }
  }
  for (size_t r = 0; r < s.port.size(); ++r) {
    if (auto d = holding_difference(*s.port[r], *s.emulated[r])) {
      return rank_name(s.inst, static_cast<int64_t>(r)) +
             ", port vs one-process emulation (\"real code\" below): " + *d;
    }
  }
  return full_params(spec, layouts, s);
}

// Each real rank's part of the step's grads, by world rank; nothing when a part does not fit
// its dtype.
std::optional<std::vector<Grads>> real_parts(const model::CaseSpec& spec,
                                             const model::StepInputs& in, const Sides& s) {
  std::vector<Grads> parts;
  for (size_t g = 0; g < s.real.size(); ++g) {
    auto part = rank_grads(spec, in.grads, s.rank_of(g), instance_ranks(spec, s.inst));
    if (!part) {
      RC_TAG("a grad part does not fit its dtype");
      return std::nullopt;
    }
    parts.push_back(std::move(*part));
  }
  return parts;
}

// One training step of every real rank of `real`, each with its part, all at once.
void step_real(rig::MegatronWorld& world, Ranks& real, const std::vector<Grads>& parts,
               const model::StepInputs& in) {
  world.on_every_rank([&](int g) {
    auto& rank = *real[static_cast<size_t>(g)];
    rank.zero_grad(/*set_to_none=*/true);
    rank.backward(parts[static_cast<size_t>(g)]);
    rank.step(in);
  });
}

// One training step on every side; false when it cannot be compared (the emulation raised, or a
// part of the grads does not fit its dtype).
bool step_all(const model::CaseSpec& spec, const model::StepInputs& in, rig::MegatronWorld& world,
              Sides& s) {
  const auto parts = real_parts(spec, in, s);
  if (!parts) return false;
  for (size_t r = 0; r < s.emulated.size(); ++r) {
    for (auto* side : {s.emulated[r].get(), s.port[r].get()}) {
      side->zero_grad(/*set_to_none=*/true);
      side->backward(in.grads);
    }
    if (!step_outcome(*s.emulated[r], in).empty()) {
      RC_TAG("the emulated step raised");
      return false;
    }
    s.port[r]->step(in);
  }
  step_real(world, s.real, *parts, in);
  return true;
}

// One training step of the real ranks and the port; false when it cannot be compared (a part
// of the grads does not fit its dtype, or the port's step raised).
bool step_real_and_port(const model::CaseSpec& spec, const model::StepInputs& in,
                        rig::MegatronWorld& world, Sides& s) {
  const auto parts = real_parts(spec, in, s);
  if (!parts) return false;
  for (auto& rank : s.port) {
    rank->zero_grad(/*set_to_none=*/true);
    rank->backward(in.grads);
    if (!step_outcome(*rank, in).empty()) {
      RC_TAG("the port's step raised");
      return false;
    }
  }
  step_real(world, s.real, *parts, in);
  return true;
}

// A directory the real ranks' sharded checkpoint lives in, removed with it.
class CheckpointDirectory {
 public:
  CheckpointDirectory() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "shardcheck-ckpt.XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot make a checkpoint directory under " +
                               std::filesystem::temp_directory_path().string());
    }
    path_ = pattern;
  }
  ~CheckpointDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  CheckpointDirectory(const CheckpointDirectory&) = delete;
  CheckpointDirectory& operator=(const CheckpointDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The real ranks of `s` that hold each instance rank (expert-parallel rank 0's), by instance
// rank.
std::vector<const rig::RankUnderTest*> instance_ranks_of(const Sides& s) {
  std::vector<const rig::RankUnderTest*> out;
  for (size_t g = 0; g < s.real.size(); g += static_cast<size_t>(s.ep)) {
    out.push_back(s.real[g].get());
  }
  return out;
}

// One side's ranks and the world they run on.
struct Group {
  rig::MegatronWorld& world;
  Sides& sides;
};

// The real ranks of `a` save `c` (the torch format, loaded on the same world; a sharded
// torch_dist checkpoint, on any) and those of `z` load it: what that raised.
Difference real_save_and_load(Group a, Group z, RealRanksCheckpoint c) {
  try {
    if (c == RealRanksCheckpoint::kTorch) {
      std::vector<rig::Checkpoint> ck(a.sides.real.size());
      a.world.on_every_rank([&](int g) { ck[g] = rig::save_dp_zero(*a.sides.real[g]); });
      z.world.on_every_rank([&](int g) { rig::load_dp_zero(*z.sides.real[g], ck[g]); });
      return std::nullopt;
    }
    const CheckpointDirectory dir;
    const std::string sharding =
        c == RealRanksCheckpoint::kDpReshardable ? "dp_reshardable" : "fully_reshardable";
    a.world.on_every_rank(
        [&](int g) { rig::save_sharded(*a.sides.real[g], dir.path(), sharding); });
    z.world.on_every_rank([&](int g) { rig::load_sharded(*z.sides.real[g], dir.path()); });
  } catch (const rig::MegatronWorldFailed& e) {
    return "real ranks, saving or loading " + real_checkpoint_name(c) + ": " + e.what();
  }
  return std::nullopt;
}

RealRanksCheckpoint real_checkpoint_of(rig::GatheredFormat format) {
  return format == rig::GatheredFormat::kDpZero ? RealRanksCheckpoint::kTorch
                                                : RealRanksCheckpoint::kFullyReshardable;
}

// The real ranks of `a` (of `saved`) saved in `format` and loaded by those of `z` (of `loaded`):
// what the save or load raised, else the first element of an instance rank's exp_avg, exp_avg_sq
// or fp32 master, or a piece's step count, that did not come back.
Difference real_round_trip(const model::CaseSpec& saved, const model::CaseSpec& loaded, Group a,
                           Group z, rig::GatheredFormat format) {
  if (auto d = real_save_and_load(a, z, real_checkpoint_of(format))) return d;
  const bool expert = a.sides.inst == model::Instance::kExpert;
  return round_trip_difference(
      saved, loaded, a.sides.inst, instance_ranks_of(a.sides), instance_ranks_of(z.sides),
      std::string("real ranks, ") + (expert ? "expert " : "dense "), rig::format_name(format));
}

// The port's ranks of `a` saved as the port saves what the real ranks saved in `c` (its gathered
// checkpoint of that format; for dp_reshardable, which the port does not model, its distributed
// checkpoint, fully_sharded_model_space) and loaded by those of `z`: what that raised.
Difference port_save_and_load(const Sides& a, Sides& z, RealRanksCheckpoint c) {
  std::vector<const rig::RankUnderTest*> port;
  for (const auto& rank : a.port) port.push_back(rank.get());
  const std::string raised = raised_by([&] {
    if (c == RealRanksCheckpoint::kDpReshardable) {
      const std::vector<rig::Checkpoint> saved = rig::save_distributed(port);
      for (size_t r = 0; r < z.port.size(); ++r) z.port[r]->load_distributed(saved[r]);
      return;
    }
    const rig::GatheredFormat format = c == RealRanksCheckpoint::kTorch
                                           ? rig::GatheredFormat::kDpZero
                                           : rig::GatheredFormat::kFullyReshardable;
    const rig::GatheredCheckpoint saved = rig::save_gathered(port, format);
    for (auto& rank : z.port) rank->load_gathered(saved);
  });
  if (!raised.empty()) {
    const char* counterpart = c == RealRanksCheckpoint::kDpReshardable ? "distributed checkpoint"
                              : c == RealRanksCheckpoint::kTorch       ? "dp_zero_gather_scatter"
                                                                       : "fully_reshardable";
    return std::string("the port's ") + counterpart + " save or load raised: " + raised;
  }
  return std::nullopt;
}

// Saves the real ranks of `a` in `c` and loads that into those of `z`; the port's ranks the same
// through its counterpart. What either raises.
Difference save_and_load(Group a, Group z, RealRanksCheckpoint c) {
  if (auto d = real_save_and_load(a, z, c)) return d;
  return port_save_and_load(a.sides, z.sides, c);
}

// Each port rank of `z` against the real rank that holds it (model values left out: the real
// ranks hold the gathered parameters).
Difference port_difference(const Sides& z) {
  for (size_t r = 0; r < z.port.size(); ++r) {
    const size_t g = r * static_cast<size_t>(z.ep);
    if (auto d = holding_difference(*z.port[r], *z.real[g], /*with_model_values=*/false)) {
      return z.name(g) + ", port vs real ranks: " + *d;
    }
  }
  return std::nullopt;
}

// Every resumed real rank of `z` against the same rank of `a`, never interrupted (model values
// included: both hold the gathered parameters), and each resumed port rank against its real rank.
Difference resumed_difference(const Sides& a, const Sides& z) {
  for (size_t g = 0; g < z.real.size(); ++g) {
    if (auto d = holding_difference(*a.real[g], *z.real[g])) {
      return z.name(g) +
             ", real ranks never interrupted (\"port\" below) vs resumed (\"real "
             "code\" below): " +
             *d;
    }
  }
  return port_difference(z);
}

bool any_construction_error(const Sides& s) {
  for (const Ranks* side : {&s.real, &s.emulated, &s.port}) {
    for (const auto& rank : *side) {
      if (rank->construction().error) return true;
    }
  }
  return false;
}

}  // namespace

std::string real_checkpoint_name(RealRanksCheckpoint c) {
  switch (c) {
    case RealRanksCheckpoint::kTorch:
      return "the torch-format checkpoint";
    case RealRanksCheckpoint::kFullyReshardable:
      return "the fully_reshardable torch_dist checkpoint";
    case RealRanksCheckpoint::kDpReshardable:
      return "the dp_reshardable torch_dist checkpoint";
  }
  return "";
}

bool real_ranks_world(const model::CaseSpec& spec) {
  const bool power_of_two = spec.dp >= 2 && (spec.dp & (spec.dp - 1)) == 0;
  return power_of_two && spec.expert_dp >= 1 && spec.dp % spec.expert_dp == 0;
}

void run_real_ranks(const model::CaseSpec& spec, const gen::Schedule& schedule,
                    const sut::Behaviour& behaviour, const rig::MegatronTarget& tree) {
  RC_PRE(real_ranks_world(spec));
  tag_coverage(spec);
  const auto layouts = model::full_param_layout(spec);
  const rig::ParamValues initial = rig::initial_values(spec, /*seed=*/2024);
  rig::MegatronWorld& world = rig::MegatronWorld::of(tree, static_cast<int>(spec.dp));
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    Sides s = build(spec, inst, behaviour, tree, world, initial);
    RC_CLASSIFY(inst == model::Instance::kExpert && s.ep > 1, "expert parallelism > 1");
    Difference d = constructions(s);
    if (!d && any_construction_error(s)) continue;  // the same error everywhere: no steps
    if (!d) d = holdings(spec, layouts, s);
    for (size_t k = 0; !d && k < schedule.steps.size(); ++k) {
      const auto in = model::as_backward_delivers(spec, gen::materialise(spec, schedule.steps[k]));
      if (!step_all(spec, in, world, s)) break;
      d = holdings(spec, layouts, s);
      if (d) *d = "after step " + std::to_string(k + 1) + ": " + *d;
    }
    if (d) {
      RC_LOG() << "dp " << spec.dp << ", expert dp " << spec.expert_dp << ", variant "
               << behaviour.name << ": " << *d << "\n";
    }
    RC_ASSERT(!d);
  }
}

void run_real_ranks_resume(const model::CaseSpec& spec, const gen::Schedule& schedule, size_t split,
                           RealRanksCheckpoint checkpoint, const sut::Behaviour& behaviour,
                           const rig::MegatronTarget& tree) {
  RC_PRE(real_ranks_world(spec));
  RC_PRE(split >= 1 && split < schedule.steps.size());
  tag_coverage(spec);
  rig::MegatronWorld& world = rig::MegatronWorld::of(tree, static_cast<int>(spec.dp));
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    Sides a = build(spec, inst, behaviour, tree, world, rig::initial_values(spec, 2024), false);
    // Construction and refused steps are the other properties' business.
    RC_PRE(!any_construction_error(a));
    std::vector<model::StepInputs> in;
    for (const auto& step : schedule.steps) {
      in.push_back(model::as_backward_delivers(spec, gen::materialise(spec, step)));
    }
    for (size_t k = 0; k < split; ++k) RC_PRE(step_real_and_port(spec, in[k], world, a));
    Sides z = build(spec, inst, behaviour, tree, world, rig::initial_values(spec, 4048), false);
    Difference d = save_and_load({world, a}, {world, z}, checkpoint);
    if (!d) d = resumed_difference(a, z);
    if (d) *d = "right after the load: " + *d;
    for (size_t k = split; !d && k < in.size(); ++k) {
      if (!step_real_and_port(spec, in[k], world, a) ||
          !step_real_and_port(spec, in[k], world, z)) {
        break;
      }
      d = resumed_difference(a, z);
      if (d) *d = "after step " + std::to_string(k + 1) + ": " + *d;
    }
    if (d) {
      RC_LOG() << "dp " << spec.dp << ", expert dp " << spec.expert_dp << ", "
               << real_checkpoint_name(checkpoint) << " saved after step " << split << ", variant "
               << behaviour.name << ": " << *d << "\n";
    }
    RC_ASSERT(!d);
  }
}

void run_real_ranks_reshard(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            size_t split, int other_dp, const sut::Behaviour& behaviour,
                            const rig::MegatronTarget& tree) {
  model::CaseSpec other = spec;
  other.dp = other.expert_dp = other_dp;
  RC_PRE(real_ranks_world(spec) && real_ranks_world(other) && other_dp != spec.dp);
  RC_PRE(split >= 1 && split <= schedule.steps.size());
  tag_coverage(spec);
  RC_CLASSIFY(other_dp > spec.dp, "loaded at a larger DP size");
  RC_CLASSIFY(other_dp < spec.dp, "loaded at a smaller DP size");
  rig::MegatronWorld& saving = rig::MegatronWorld::of(tree, static_cast<int>(spec.dp));
  rig::MegatronWorld& loading = rig::MegatronWorld::of(tree, other_dp);
  std::vector<model::StepInputs> in;
  for (const auto& step : schedule.steps) {
    in.push_back(model::as_backward_delivers(spec, gen::materialise(spec, step)));
  }
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    Sides a = build(spec, inst, behaviour, tree, saving, rig::initial_values(spec, 2024), false);
    RC_PRE(!any_construction_error(a));
    for (size_t k = 0; k < split; ++k) RC_PRE(step_real_and_port(spec, in[k], saving, a));
    Sides z = build(other, inst, behaviour, tree, loading, rig::initial_values(other, 4048), false);
    RC_PRE(!any_construction_error(z));
    Difference d = real_round_trip(spec, other, {saving, a}, {loading, z},
                                   rig::GatheredFormat::kFullyReshardable);
    if (!d) d = port_save_and_load(a, z, RealRanksCheckpoint::kFullyReshardable);
    if (!d) d = port_difference(z);
    if (d) *d = "right after the load: " + *d;
    for (size_t k = split; !d && k < in.size(); ++k) {
      const auto step =
          model::as_backward_delivers(other, gen::materialise(other, schedule.steps[k]));
      if (!step_real_and_port(other, step, loading, z)) break;
      d = port_difference(z);
      if (d) *d = "after step " + std::to_string(k + 1) + ": " + *d;
    }
    if (d) {
      RC_LOG() << "saved at dp " << spec.dp << " (expert dp " << spec.expert_dp << ") after step "
               << split << ", loaded at dp " << other_dp << ", variant " << behaviour.name << ": "
               << *d << "\n";
    }
    RC_ASSERT(!d);
  }
}

void run_real_ranks_round_trip(const model::CaseSpec& spec, const gen::Schedule& schedule,
                               rig::GatheredFormat format, int other_dp,
                               const sut::Behaviour& behaviour, const rig::MegatronTarget& tree) {
  model::CaseSpec other = spec;
  if (other_dp > 0) other.dp = other.expert_dp = other_dp;
  // A world of one rank as well: no gather crosses processes there, but the formats' code runs.
  const auto served = [](const model::CaseSpec& c) { return c.dp == 1 || real_ranks_world(c); };
  if (!served(spec) || !served(other)) {
    throw rig::NotRunAgainstRealCode(
        "gathered checkpoints run on real ranks, one worker per DP rank: dp " +
        std::to_string(spec.dp) + " (expert dp " + std::to_string(spec.expert_dp) +
        "), loaded at dp " + std::to_string(other.dp) +
        ", is not a world of them (dp 1 or a power of two, expert dp dividing it)");
  }
  RC_CLASSIFY(format == rig::GatheredFormat::kDpZero, "dp_zero_gather_scatter");
  RC_CLASSIFY(format == rig::GatheredFormat::kFullyReshardable, "fully_reshardable");
  RC_CLASSIFY(other_dp > 0, "other DP size");
  tag_coverage(spec);
  rig::MegatronWorld& saving = rig::MegatronWorld::of(tree, static_cast<int>(spec.dp));
  rig::MegatronWorld& loading = rig::MegatronWorld::of(tree, static_cast<int>(other.dp));
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(spec, inst)) continue;
    Sides a = build(spec, inst, behaviour, tree, saving, rig::initial_values(spec, 1000), false);
    // Construction and refused steps are the other properties' business.
    RC_PRE(!any_construction_error(a));
    for (const gen::StepDraw& step : schedule.steps) {
      const auto in = model::as_backward_delivers(spec, gen::materialise(spec, step));
      RC_PRE(step_real_and_port(spec, in, saving, a));
    }
    Sides z = build(other, inst, behaviour, tree, loading, rig::initial_values(other, 3000), false);
    RC_PRE(!any_construction_error(z));
    const Difference d = real_round_trip(spec, other, {saving, a}, {loading, z}, format);
    if (d) {
      RC_LOG() << "saved at dp " << spec.dp << " (expert dp " << spec.expert_dp << ") after "
               << schedule.steps.size() << " step(s), loaded at dp " << other.dp << ", "
               << under_test(behaviour) << ": " << *d << "\n";
    }
    RC_ASSERT(!d);
  }
}

}  // namespace sc::props
