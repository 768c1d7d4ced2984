// Every model-versus-port property as a named body taking the variant to check, so that the
// RC_GTEST_PROPs, the mutant tests and the replay tool run the very same claims.
//
// A replayable property draws its inputs into a CaseInputs and runs its `check` on them; when
// the check fails it writes the case file (properties/case_file.h) and RC_LOGs its path, the
// JSON and the replay command, which RapidCheck prints with the shrunk case.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "properties/case_file.h"
#include "sim/sut/behaviour.h"

namespace sc::props {

// One property: "Suite.Name", a body that draws its own inputs and RC_ASSERTs its claim, and,
// for properties whose inputs fit a CaseInputs, the claim on given inputs (empty otherwise).
struct PropertyDef {
  std::string name;
  std::function<void(const sut::Behaviour&)> body;
  std::function<void(const CaseInputs&, const sut::Behaviour&)> check;
};

// The stateful property (properties/hybrid_state.cc): a case with the hybrid optimizer, a dense
// DP rank and a sequence of commands (Step, SetLr, SetWd, ZeroGrad, SaveState,
// Rebuild+LoadState, ReloadModelParams), drawn; and the sequence run against the reference,
// compared bit for bit after every command.
CaseInputs draw_hybrid_state_case();
void check_hybrid_state_case(const CaseInputs& in, const sut::Behaviour& b);

// All diff properties, in a fixed order.
const std::vector<PropertyDef>& diff_properties();
// The property called `name` (aborts on an unknown name: a programming error).
const PropertyDef& diff_property(const std::string& name);
// The property called `name`, or nullptr.
const PropertyDef* find_diff_property(const std::string& name);

// Where failing properties write case files: $SC_CASE_DIR, else "shardcheck-cases" under the
// system's temporary directory.
std::string case_file_dir();

}  // namespace sc::props
