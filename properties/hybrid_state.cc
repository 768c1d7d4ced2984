// Stateful test (rc::state): sequences of Step, ZeroGrad, SetLr, SetWd, SaveState, Rebuild +
// LoadState and ReloadModelParams, driven against the distributed optimizer with the hybrid
// optimizer inside (the SUT, one rank) and against model::RankReference (the model), compared
// bit for bit after every command.
#include "properties/hybrid_state.h"

#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <cstring>
#include <iomanip>
#include <memory>
#include <optional>
#include <string>

#include "model/layout.h"
#include "model/reference.h"
#include "model/shard.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"
#include "properties/gen/step_gen.h"
#include "properties/overloaded.h"
#include "properties/support.h"
#include "sim/rig/fma_probe.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {
namespace {

// The model: the reference, the hyper-parameters in force, and the last saved reference. The
// model that generates a sequence has no reference (`ref` null): the generators and
// preconditions read only `hyper` and `has_saved`, and the sequence then runs as a case file's.
struct HybridModel {
  std::shared_ptr<const model::CaseSpec> c;
  std::shared_ptr<const model::RankPlan> plan;
  std::shared_ptr<model::RankReference> ref;
  std::vector<model::AdamWHyper> hyper;  // per case group
  std::shared_ptr<model::RankReference> saved;
  bool has_saved = false;
  int steps = 0;  // Step commands so far, so that a failure names its step by number
};

// The system under test: one rank's rig (replaced by Rebuild) and the last checkpoint.
struct HybridSut {
  model::Instance instance = model::Instance::kDense;
  int64_t rank = 0;
  sut::Behaviour behaviour;
  std::unique_ptr<rig::RankUnderTest> rig;
  std::optional<rig::Checkpoint> checkpoint;
  uint64_t rebuilds = 0;
};

using Cmd = rc::state::Command<HybridModel, HybridSut>;

// Every command of a sequence: an rc::state command that is also its case file's data.
struct StateCmd : Cmd {
  virtual StateCommand data() const = 0;
};

void expect_model_equal(const HybridModel& m, const HybridSut& s, const std::string& after) {
  for (size_t g = 0; g < m.plan->groups.size(); ++g) {
    for (size_t i = 0; i < m.plan->groups[g].installed.size(); ++i) {
      const std::vector<float> got = s.rig->model_piece(g, i);
      const std::vector<float>& want = m.ref->model_piece(g, i);
      for (size_t k = 0; k < got.size(); ++k) {
        if (std::memcmp(&got[k], &want[k], sizeof(float)) != 0) {
          // Nine significant digits name one float: six printed both sides of a one-ulp
          // difference alike on the first GPU run.
          RC_LOG() << std::setprecision(9) << under_test(s.behaviour) << ": after " << after << ", "
                   << m.c->params[m.plan->groups[g].installed[i].param].name << " element " << k
                   << " of its piece: " << tested_side() << " " << got[k] << ", reference "
                   << want[k] << "\n";
          RC_FAIL("model parameter differs from the reference");
        }
      }
    }
  }
}

struct Step : StateCmd {
  gen::StepDraw draw;
  explicit Step(gen::StepDraw d) : draw(std::move(d)) {}
  explicit Step(const HybridModel& m)
      : draw(*rc::gen::exec([n = m.c->params.size()] {  // by value: shrinking re-runs it
          gen::StepDraw d;
          d.grad_seed = *rc::gen::arbitrary<uint64_t>();
          for (size_t i = 0; i < n; ++i) {
            d.kinds.push_back(*gen::weighted_choice<gen::GradKind>(
                {{6, gen::GradKind::kOrdinary}, {2, gen::GradKind::kZero}}));
          }
          return d;
        })) {
    draw.hyper = m.hyper;
  }
  void apply(HybridModel& m) const override {
    ++m.steps;
    if (!m.ref) return;
    m.ref = std::make_shared<model::RankReference>(*m.ref);
    m.ref->step(gen::materialise(*m.c, draw));
  }
  void run(const HybridModel& m, HybridSut& s) const override {
    s.rig->step(gen::materialise(*m.c, draw));
    HybridModel next = nextState(m);
    expect_model_equal(next, s, "Step " + std::to_string(next.steps));
  }
  StateCommand data() const override { return state_cmd::Step{draw}; }
  void show(std::ostream& os) const override { os << "Step(seed=" << draw.grad_seed << ")"; }
};

struct SetHyper : StateCmd {
  int group;
  bool lr;
  double value;
  SetHyper(int g, bool is_lr, double v) : group(g), lr(is_lr), value(v) {}
  explicit SetHyper(const HybridModel& m)
      : group(*rc::gen::inRange(0, m.c->num_groups())),
        lr(*rc::gen::arbitrary<bool>()),
        value(lr ? *gen::weighted_choice<double>({{1, 1e-3}, {1, 1e-2}, {1, 0.0}})
                 : *gen::weighted_choice<double>({{1, 0.0}, {1, 0.1}})) {}
  void apply(HybridModel& m) const override {
    (lr ? m.hyper[group].lr : m.hyper[group].weight_decay) = value;
  }
  void run(const HybridModel&, HybridSut&) const override {}  // takes effect at the next Step
  StateCommand data() const override { return state_cmd::SetHyper{group, lr, value}; }
  void show(std::ostream& os) const override {
    os << (lr ? "SetLr" : "SetWd") << "(group=" << group << ", " << value << ")";
  }
};

struct ZeroGrad : StateCmd {
  bool set_to_none;
  ZeroGrad() : set_to_none(*rc::gen::arbitrary<bool>()) {}
  explicit ZeroGrad(bool to_none) : set_to_none(to_none) {}
  void run(const HybridModel& m, HybridSut& s) const override {
    s.rig->zero_grad(set_to_none);
    expect_model_equal(m, s, "ZeroGrad (after Step " + std::to_string(m.steps) + ")");
  }
  StateCommand data() const override { return state_cmd::ZeroGrad{set_to_none}; }
  void show(std::ostream& os) const override {
    os << "ZeroGrad(set_to_none=" << set_to_none << ")";
  }
};

struct SaveState : StateCmd {
  void apply(HybridModel& m) const override {
    m.saved = m.ref;
    m.has_saved = true;
  }
  void run(const HybridModel&, HybridSut& s) const override { s.checkpoint = s.rig->save(); }
  StateCommand data() const override { return state_cmd::SaveState{}; }
  void show(std::ostream& os) const override { os << "SaveState"; }
};

struct RebuildAndLoadState : StateCmd {
  // Checked again while shrinking drops commands.
  void checkPreconditions(const HybridModel& m) const override { RC_PRE(m.has_saved); }
  void apply(HybridModel& m) const override { m.ref = m.saved; }
  void run(const HybridModel& m, HybridSut& s) const override {
    s.rig = rig::build_rank(target_for(s.behaviour), *m.c, s.instance, s.rank, 5000 + ++s.rebuilds);
    RC_ASSERT(!s.rig->construction().error);
    s.rig->load(*s.checkpoint);
    expect_model_equal(nextState(m), s,
                       "Rebuild+LoadState (after Step " + std::to_string(m.steps) + ")");
  }
  StateCommand data() const override { return state_cmd::RebuildAndLoadState{}; }
  void show(std::ostream& os) const override { os << "Rebuild+LoadState"; }
};

struct ReloadModelParams : StateCmd {
  void apply(HybridModel& m) const override {
    if (!m.ref) return;
    m.ref = std::make_shared<model::RankReference>(*m.ref);
    m.ref->reload_from_model();
  }
  void run(const HybridModel& m, HybridSut& s) const override {
    s.rig->reload_model_params();
    expect_model_equal(nextState(m), s,
                       "ReloadModelParams (after Step " + std::to_string(m.steps) + ")");
  }
  StateCommand data() const override { return state_cmd::ReloadModelParams{}; }
  void show(std::ostream& os) const override { os << "ReloadModelParams"; }
};

using Sequence = rc::state::Commands<Cmd>;

// Every command the sequence generator makes is one of ours.
StateCommand to_data(const Cmd& cmd) { return static_cast<const StateCmd&>(cmd).data(); }

std::shared_ptr<const Cmd> from_data(const StateCommand& k) {
  return std::visit(
      Overloaded{[](const state_cmd::Step& x) -> std::shared_ptr<const Cmd> {
                   return std::make_shared<Step>(x.draw);
                 },
                 [](const state_cmd::SetHyper& x) -> std::shared_ptr<const Cmd> {
                   return std::make_shared<SetHyper>(x.group, x.lr, x.value);
                 },
                 [](const state_cmd::ZeroGrad& x) -> std::shared_ptr<const Cmd> {
                   return std::make_shared<ZeroGrad>(x.set_to_none);
                 },
                 [](const state_cmd::SaveState&) -> std::shared_ptr<const Cmd> {
                   return std::make_shared<SaveState>();
                 },
                 [](const state_cmd::RebuildAndLoadState&) -> std::shared_ptr<const Cmd> {
                   return std::make_shared<RebuildAndLoadState>();
                 },
                 [](const state_cmd::ReloadModelParams&) -> std::shared_ptr<const Cmd> {
                   return std::make_shared<ReloadModelParams>();
                 }},
      k);
}

}  // namespace

CaseInputs draw_hybrid_state_case() {
  CaseInputs in;
  in.c = *gen::case_spec();
  in.c.cpu_offload = true;
  RC_PRE(model::instance_present(in.c, model::Instance::kDense));
  int64_t total = 0;
  for (const auto& p : in.c.params) total += p.numel();
  RC_PRE(total <= 20000);
  in.rank = *rc::gen::inRange<int64_t>(0, in.c.dp);
  HybridModel m;  // no reference: see HybridModel
  m.c = std::make_shared<const model::CaseSpec>(in.c);
  m.hyper.assign(in.c.num_groups(), model::AdamWHyper{});
  // Up to about 30 commands a sequence keeps a case under a tenth of a second.
  const Sequence commands = *rc::gen::resize(
      30, rc::state::gen::commands(
              m, rc::state::gen::execOneOfWithArgs<Step, SetHyper, ZeroGrad, SaveState,
                                                   RebuildAndLoadState, ReloadModelParams>()));
  for (const auto& cmd : commands) in.commands.push_back(to_data(*cmd));
  return in;
}

void check_hybrid_state_case(const CaseInputs& in, const sut::Behaviour& behaviour) {
  RC_ASSERT(in.c.cpu_offload);
  RC_ASSERT(in.rank >= 0 && in.rank < in.c.dp);
  const auto kernels = rig::torch_cpu_kernels();
  RC_ASSERT(kernels.has_value());
  auto c = std::make_shared<const model::CaseSpec>(in.c);
  const auto layouts = model::full_param_layout(*c);
  auto plan = std::make_shared<const model::RankPlan>(
      model::plan_rank(*c, layouts, model::Instance::kDense, in.rank));
  HybridSut s;
  s.rank = in.rank;
  s.behaviour = behaviour;
  s.rig = rig::build_rank(target_for(behaviour), *c, model::Instance::kDense, in.rank, 77);
  RC_ASSERT(!s.rig->construction().error);
  HybridModel m;
  m.c = c;
  m.plan = plan;
  m.ref = std::make_shared<model::RankReference>(*c, *plan, s.rig->initial_values(), *kernels,
                                                 device().is_cuda());
  m.hyper.assign(c->num_groups(), model::AdamWHyper{});
  Sequence commands;
  for (const StateCommand& k : in.commands) commands.push_back(from_data(k));
  rc::state::runAll(commands, m, s);
}

}  // namespace sc::props
