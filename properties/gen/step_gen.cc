#include "properties/gen/step_gen.h"

#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"
#include "sim/rig/rng.h"

namespace sc::gen {

namespace {

rc::Gen<StepDraw> step_draw(const model::CaseSpec& c, bool zero_lr) {
  const size_t n = c.params.size();
  const int groups = c.num_groups();
  return rc::gen::exec([n, groups, zero_lr] {
    StepDraw d;
    d.grad_seed = *rc::gen::arbitrary<uint64_t>();
    for (size_t i = 0; i < n; ++i) {
      d.kinds.push_back(*weighted_choice<GradKind>({{6, GradKind::kOrdinary},
                                                    {2, GradKind::kZero},
                                                    {1, GradKind::kTiny},
                                                    {1, GradKind::kLarge}}));
    }
    for (int g = 0; g < groups; ++g) {
      model::AdamWHyper h;
      if (zero_lr) {
        h.lr = 0.0;
        h.weight_decay = 0.0;
      } else {
        h.lr = *weighted_choice<double>({{3, 1e-3}, {2, 1e-2}, {1, 1e-4}, {1, 0.0}});
        h.weight_decay = *weighted_choice<double>({{2, 0.0}, {2, 0.1}, {1, 0.01}});
      }
      d.hyper.push_back(h);
    }
    return d;
  });
}

rc::Gen<Schedule> schedule_of(const model::CaseSpec& c, int max_steps, bool zero_lr) {
  return rc::gen::exec([c, max_steps, zero_lr] {
    Schedule s;
    const int steps = *rc::gen::inRange(1, max_steps + 1);
    for (int k = 0; k < steps; ++k) s.steps.push_back(*step_draw(c, zero_lr));
    return s;
  });
}

}  // namespace

rc::Gen<Schedule> schedule(const model::CaseSpec& spec, int max_steps) {
  return rc::gen::resize(rc::kNominalSize, schedule_of(spec, max_steps, false));
}

rc::Gen<Schedule> zero_lr_schedule(const model::CaseSpec& spec, int max_steps) {
  return rc::gen::resize(rc::kNominalSize, schedule_of(spec, max_steps, true));
}

model::StepInputs materialise(const model::CaseSpec& spec, const StepDraw& draw) {
  model::StepInputs in;
  rig::SplitMix64 rng(draw.grad_seed);
  for (size_t i = 0; i < spec.params.size(); ++i) {
    std::vector<float> g(static_cast<size_t>(spec.params[i].numel()));
    const float scale = draw.kinds[i] == GradKind::kTiny    ? 1e-6f
                        : draw.kinds[i] == GradKind::kLarge ? 1e3f
                                                            : 1.0f;
    for (float& x : g) x = draw.kinds[i] == GradKind::kZero ? 0.0f : rng.symmetric_unit() * scale;
    in.grads.push_back(std::move(g));
  }
  in.group_hyper = draw.hyper;
  return in;
}

double max_lr(const Schedule& schedule) {
  double m = 0;
  for (const auto& d : schedule.steps) {
    for (const auto& h : d.hyper) m = std::max(m, h.lr);
  }
  return m;
}

void showValue(const Schedule& schedule, std::ostream& os) {
  os << "Schedule{" << schedule.steps.size() << " steps:";
  for (const auto& d : schedule.steps) {
    os << " [seed=" << d.grad_seed << " kinds=";
    for (GradKind k : d.kinds) os << "OZTL"[static_cast<int>(k)];
    for (size_t g = 0; g < d.hyper.size(); ++g) {
      os << " g" << g << ":lr=" << d.hyper[g].lr << ",wd=" << d.hyper[g].weight_decay;
    }
    os << "]";
  }
  os << "}";
}

}  // namespace sc::gen
