#include "properties/real_ranks_props.h"

#include <rapidcheck.h>

#include <cstring>
#include <memory>
#include <optional>
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

// One instance's ranks on the three sides, indexed by rank.
struct Sides {
  Ranks real, emulated, port;
};

std::string rank_name(model::Instance inst, int64_t r) {
  return std::string(inst == model::Instance::kExpert ? "expert" : "dense") + " rank " +
         std::to_string(r);
}

// The gradient rank `r` of `dp` delivers so that DDP's 1/dp scaling and the SUM reduce-scatter
// give back `grads`; nothing when a part does not fit its parameter's dtype (an fp16 part times
// dp past 65504).
std::optional<Grads> rank_grads(const model::CaseSpec& spec, const Grads& grads, int r, int dp) {
  Grads out(grads.size());
  for (size_t p = 0; p < grads.size(); ++p) {
    for (const float g : grads[p]) {
      const float part = rig::grad_part(g, r, dp) * static_cast<float>(dp);
      const float delivered = model::backward_grad(spec.params[p].dtype, part);
      if (std::memcmp(&delivered, &part, sizeof part) != 0) return std::nullopt;
      out[p].push_back(part);
    }
  }
  return out;
}

Sides build(const model::CaseSpec& spec, model::Instance inst, const sut::Behaviour& b,
            const rig::MegatronTarget& tree, rig::MegatronWorld& world,
            const rig::ParamValues& initial) {
  Sides s;
  s.real.resize(static_cast<size_t>(spec.dp));
  world.on_every_rank([&](int r) {
    s.real[static_cast<size_t>(r)] = rig::make_megatron_rank(world.worker(r), spec, inst, r,
                                                             initial, /*check_stream_order=*/false,
                                                             /*training_loop=*/true);
  });
  for (int64_t r = 0; r < spec.dp; ++r) {
    s.emulated.push_back(
        rig::build_rank(rig::Target{b, device(), tree, true}, spec, inst, r, initial));
    s.port.push_back(
        rig::build_rank(rig::Target{b, device(), std::nullopt, true}, spec, inst, r, initial));
  }
  return s;
}

Difference constructions(const Sides& s, model::Instance inst) {
  for (size_t r = 0; r < s.real.size(); ++r) {
    const std::string at = rank_name(inst, static_cast<int64_t>(r));
    if (auto d =
            construction_difference(s.emulated[r]->construction(), s.real[r]->construction())) {
      return at + ", construction, one-process emulation (\"port\" below) vs real ranks: " + *d;
    }
    if (auto d =
            construction_difference(s.port[r]->construction(), s.emulated[r]->construction())) {
      return at + ", construction, port vs one-process emulation (\"real code\" below): " + *d;
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

// Every real rank's full parameters equal rank 0's, and on each rank's owned pieces the values
// its emulated rank stepped to.
Difference full_params(const model::CaseSpec& spec, const std::vector<model::BufferLayout>& layouts,
                       model::Instance inst, const Sides& s) {
  const auto gathered = s.real[0]->model_values();
  for (size_t r = 1; r < s.real.size(); ++r) {
    if (s.real[r]->model_values() != gathered) {  // NaN != NaN: a NaN fails, read it off the log
      return rank_name(inst, static_cast<int64_t>(r)) +
             ": its full parameters differ from rank "
             "0's after the param all-gather";
    }
  }
  const auto local = local_positions(spec, inst);
  for (size_t r = 0; r < s.real.size(); ++r) {
    const auto plan = model::plan_rank(spec, layouts, inst, static_cast<int64_t>(r));
    const auto stepped = s.emulated[r]->model_values();
    for (const auto& group : plan.groups) {
      for (const auto& e : group.installed) {
        const size_t p = static_cast<size_t>(local.at(static_cast<size_t>(e.param)));
        const auto first = static_cast<std::ptrdiff_t>(e.param_range.start);
        const auto last = static_cast<std::ptrdiff_t>(e.param_range.end);
        const std::vector<float> a(gathered.at(p).begin() + first, gathered.at(p).begin() + last);
        const std::vector<float> b(stepped.at(p).begin() + first, stepped.at(p).begin() + last);
        const std::string what = spec.params[static_cast<size_t>(e.param)].name + "[" +
                                 std::to_string(first) + ", " + std::to_string(last) +
                                 "), owned by " + rank_name(inst, static_cast<int64_t>(r)) +
                                 " (the real ranks gathered, its emulated rank stepped to)";
        if (auto v = compare_exact(a, b, what)) return v;
      }
    }
  }
  return std::nullopt;
}

Difference holdings(const model::CaseSpec& spec, const std::vector<model::BufferLayout>& layouts,
                    model::Instance inst, const Sides& s) {
  for (size_t r = 0; r < s.real.size(); ++r) {
    const std::string at = rank_name(inst, static_cast<int64_t>(r));
    if (auto d = holding_difference(*s.emulated[r], *s.real[r], /*with_model_values=*/false)) {
      return at + ", one-process emulation (\"port\" below) vs real ranks: " + *d;
    }
    if (auto d = holding_difference(*s.port[r], *s.emulated[r])) {
      return at + ", port vs one-process emulation (\"real code\" below): " + *d;
    }
  }
  return full_params(spec, layouts, inst, s);
}

// One training step on every side; false when it cannot be compared (the emulation raised, or a
// part of the grads does not fit its dtype).
bool step_all(const model::CaseSpec& spec, const model::StepInputs& in, rig::MegatronWorld& world,
              Sides& s) {
  std::vector<Grads> parts;
  for (int r = 0; r < spec.dp; ++r) {
    auto g = rank_grads(spec, in.grads, r, spec.dp);
    if (!g) {
      RC_TAG("a grad part does not fit its dtype");
      return false;
    }
    parts.push_back(std::move(*g));
  }
  for (size_t r = 0; r < s.real.size(); ++r) {
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
  world.on_every_rank([&](int r) {
    auto& rank = *s.real[static_cast<size_t>(r)];
    rank.zero_grad(/*set_to_none=*/true);
    rank.backward(parts[static_cast<size_t>(r)]);
    rank.step(in);
  });
  return true;
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

bool real_ranks_world(const model::CaseSpec& spec) {
  const bool power_of_two = spec.dp >= 2 && (spec.dp & (spec.dp - 1)) == 0;
  return power_of_two && spec.expert_dp == spec.dp;
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
    Difference d = constructions(s, inst);
    if (!d && any_construction_error(s)) continue;  // the same error everywhere: no steps
    if (!d) d = holdings(spec, layouts, inst, s);
    for (size_t k = 0; !d && k < schedule.steps.size(); ++k) {
      const auto in = model::as_backward_delivers(spec, gen::materialise(spec, schedule.steps[k]));
      if (!step_all(spec, in, world, s)) break;
      d = holdings(spec, layouts, inst, s);
      if (d) *d = "after step " + std::to_string(k + 1) + ": " + *d;
    }
    if (d) RC_LOG() << "dp " << spec.dp << ", variant " << behaviour.name << ": " << *d << "\n";
    RC_ASSERT(!d);
  }
}

}  // namespace sc::props
