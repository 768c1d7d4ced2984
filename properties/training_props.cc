#include "properties/training_props.h"

#include <sstream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "model/reference.h"
#include "model/shard.h"
#include "model/training.h"
#include "properties/checks.h"
#include "properties/coverage.h"
#include "properties/rank_checks.h"
#include "properties/support.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

namespace {

using Passes = std::vector<std::vector<std::vector<float>>>;  // per pass, per case parameter

rig::Target training_target(const sut::Behaviour& b) {
  rig::Target t = target_for(b);
  t.training_loop = true;
  return t;
}

// "dense rank 1 after step 2" (step 0: after construction).
std::string when(model::Instance inst, int64_t rank, int step) {
  std::ostringstream os;
  os << (inst == model::Instance::kExpert ? "expert" : "dense") << " rank " << rank;
  if (step == 0) {
    os << " after construction";
  } else {
    os << " after step " << step;
  }
  return os.str();
}

// Each observed parameter is a trainable leaf whose `.grad` DDP's hook dropped, and its main_grad
// holds the model's sum of `passes` since the last zeroing.
Violation check_grads(const model::CaseSpec& c, const std::vector<rig::ObservedGrad>& got,
                      const Passes& passes, const std::string& at) {
  for (const rig::ObservedGrad& o : got) {
    const std::string name = at + ", " + c.params.at(static_cast<size_t>(o.param)).name;
    if (!o.requires_grad) return name + ": no longer requires grad (detached from autograd)";
    if (!o.is_leaf) return name + ": no longer a leaf";
    if (!o.grad_is_none) return name + ": `.grad` still set after DDP's backward hook";
    std::vector<std::vector<float>> mine;
    for (const auto& pass : passes) mine.push_back(pass.at(static_cast<size_t>(o.param)));
    const Violation v = compare_exact(o.main_grad, model::main_grad_after(c, o.param, mine),
                                      name + " main_grad (" + tested_side() + " got, model wants)");
    if (v) return v;
  }
  return std::nullopt;
}

void grads_reach_main_grads(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            const sut::Behaviour& b, rig::RankUnderTest& rig, model::Instance inst,
                            int64_t r, const model::RankPlan& plan) {
  model::RankReference ref(spec, plan, rig.initial_values(), torch_kernels(),
                           device().is_cuda());
  for (size_t k = 0; k < schedule.steps.size(); ++k) {
    const model::StepInputs in =
        model::as_backward_delivers(spec, gen::materialise(spec, schedule.steps[k]));
    rig.zero_grad(/*set_to_none=*/true);
    check(check_grads(spec, rig.backward(in.grads), {in.grads}, when(inst, r, static_cast<int>(k))),
          b);
    if (ref.step_error()) return;  // the step itself is the step-flow properties' claim
    rig.step(in);
    ref.step(in);
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
        check_entry(spec, plan, ref, rig, g, i, static_cast<int>(k + 1),
                    NumericClaim::kModelParams, b);
      }
    }
  }
}

void zero_grad_clears(const model::CaseSpec& spec, const gen::Schedule& schedule,
                      const sut::Behaviour& b, rig::RankUnderTest& rig, model::Instance inst,
                      int64_t r) {
  const size_t n = schedule.steps.size();
  Passes g;
  for (size_t k = 0; k < 3; ++k) {
    g.push_back(
        model::as_backward_delivers(spec, gen::materialise(spec, schedule.steps[k % n])).grads);
  }
  const std::string at = when(inst, r, 0);
  rig.backward(g[0]);
  check(check_grads(spec, rig.backward(g[1]), {g[0], g[1]}, at + ", two backward passes"), b);
  rig.zero_grad(/*set_to_none=*/true);
  check(check_grads(spec, rig.backward(g[2]), {g[2]}, at + ", zero_grad then a backward pass"),
        b);
}

}  // namespace

void run_training_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                           const sut::Behaviour& behaviour, TrainingClaim claim) {
  tag_coverage(spec);
  RC_PRE(!schedule.steps.empty());
  for_checked_ranks(spec, [&](model::Instance inst, int64_t r, const auto& layouts) {
    const auto owned =
        rig::build_rank(training_target(behaviour), spec, inst, r, /*seed=*/1000 + r);
    rig::RankUnderTest& rig = *owned;
    check(check_constructed(rig.construction()), behaviour);
    if (claim == TrainingClaim::kGradsReachMainGrads) {
      grads_reach_main_grads(spec, schedule, behaviour, rig, inst, r,
                             model::plan_rank(spec, layouts, inst, r));
    } else {
      zero_grad_clears(spec, schedule, behaviour, rig, inst, r);
    }
  });
}

}  // namespace sc::props
