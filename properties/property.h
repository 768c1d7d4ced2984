// One property of the suite, as the registry (properties/registry.h) lists it: its name, its
// claim, what it runs against, how it draws and checks its inputs, and what is known to break it.
#pragma once

#include <rapidcheck.h>

#include <functional>
#include <string>
#include <vector>

#include "properties/case_file.h"
#include "sim/port/behaviour.h"
#include "sim/rig/capabilities.h"

namespace sc::props {

// What a property checks.
enum class Target {
  kVariant,     // the port under the variant under test (SC_VARIANT; the mutation score's mutant)
  kOwnVariant,  // the port under one fixed variant, `own_variant` (a claim about upstream)
  kModel,       // the reference model alone: laws of the intended behaviour
  // The port under the variant under test against real Megatron code from SC_MEGATRON_TREE:
  // skipped without a tree. Its kill tests run against the tree with the seed fix applied.
  kPortVsRealCode,
};

// One property.
struct Property {
  std::string name;   // "Suite.Name"
  std::string claim;  // what it asserts, in one line
  Target target = Target::kVariant;
  std::string own_variant;  // Target::kOwnVariant: the variant it always checks
  // Variants and mutants it fails on (tests/mutant_kill_test.cc shows each at a fixed seed).
  std::vector<std::string> killers;
  // Model laws: the tests that show its check failing on bad input (tests/check_strength_test.cc).
  std::vector<std::string> strength_tests;
  // What it needs of a system under test beyond the seam's core (sim/rig/capabilities.h): it
  // runs against the real code only where the megatron target serves all of them.
  std::vector<rig::Capability> needs;
  // Why it cannot run with real Megatron code whatever the worker serves (what it checks is not
  // Megatron code, or is a claim about the port); empty otherwise. Only variant properties can.
  std::string not_on_real_code;
  // Why it cannot run on the port (the port has no such code), for a property of real Megatron
  // code alone; empty otherwise. Against the port it is skipped with this reason.
  std::string not_on_port;
  // For such a property: the corpus patches of Megatron's history (../shared/megatron/history)
  // that docs/recall.json records it catching; their kill tests (Recall.GNN.*) show it failing.
  std::vector<std::string> history_killers;
  // Draws its inputs and RC_ASSERTs its claim against `behaviour` (ignored by model laws).
  std::function<void(const sut::Behaviour&)> body;
  // The claim on given inputs, for properties whose inputs fit a CaseInputs (empty otherwise).
  std::function<void(const CaseInputs&, const sut::Behaviour&)> check;
  // How it draws those inputs (empty when `check` is), and the extras of CaseInputs the draw sets
  // (properties/case_extras.h, by key): what its case files hold beyond the case and schedule.
  std::function<CaseInputs()> draw;
  std::vector<std::string> extras;
  // For a property drawn in its body, the same body with each drawn case first handed to
  // `on_control`, which runs it against a control tree and says whether it failed there; the
  // case is then discarded (a review or a recall run beside a control: what fails is the
  // difference between the trees). Empty where the body cannot offer its cases.
  using OnControl = std::function<bool(const std::function<void()>& check)>;
  std::function<void(const sut::Behaviour&, const OnControl&)> body_beside_control;
};

// For a property that draws its input in its body: the body that draws one input with `gen`
// and runs `run` on it, and the same body beside a control (the input discarded where the
// control fails it too).
template <typename Input>
void draw_in_body(Property& p, rc::Gen<Input> (*gen)(),
                  void (*run)(const Input&, const sut::Behaviour&)) {
  p.body = [gen, run](const sut::Behaviour& b) { run(*gen(), b); };
  p.body_beside_control = [gen, run](const sut::Behaviour& b,
                                     const Property::OnControl& on_control) {
    const Input input = *gen();
    RC_PRE(!on_control([&] { run(input, b); }));
    run(input, b);
  };
}

}  // namespace sc::props
