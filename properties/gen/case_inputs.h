// What one replayable property draws for one case (CaseInputs): the case, the step schedule
// and the property's own extras, with the stateful property's commands as data. Case files
// (properties/case_file.h) hold one; the draws are properties/gen/case_draws.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "model/spec.h"
#include "properties/gen/step_gen.h"

namespace sc::props {

// The commands of the stateful property (HybridOptimizerState.CommandSequencesMatchTheReference),
// as data: one struct each, named in case files as its show() prints it.
namespace state_cmd {
struct Step {
  gen::StepDraw draw;  // the gradients and the hyper-parameters in force
};
struct SetHyper {  // "SetLr" or "SetWd"
  int group = 0;   // the case's param group
  bool lr = true;  // the learning rate, else the weight decay
  double value = 0.0;
};
struct ZeroGrad {
  bool set_to_none = false;
};
struct SaveState {};
struct RebuildAndLoadState {};
struct ReloadModelParams {};
}  // namespace state_cmd

using StateCommand =
    std::variant<state_cmd::Step, state_cmd::SetHyper, state_cmd::ZeroGrad, state_cmd::SaveState,
                 state_cmd::RebuildAndLoadState, state_cmd::ReloadModelParams>;

// Everything one replayable property draws for one case.
struct CaseInputs {
  model::CaseSpec c;
  gen::Schedule schedule;             // empty for the shard-builder properties
  size_t split = 0;                   // save/load properties: steps run before the checkpoint
  double other_fraction = 0.0;        // offload invariance: the fraction compared against
  // Gathered-checkpoint properties: "dp_zero_gather_scatter" or "fully_reshardable" (empty
  // elsewhere), and the DP size that loads the checkpoint (0: the case's own).
  std::string checkpoint_format;
  int other_dp = 0;
  // Load-placement property: "cpu" when the state dict is read with map_location="cpu", empty
  // when each tensor is read where it was saved.
  std::string map_location;
  // The stateful property: the dense DP rank it drives and its command sequence (empty
  // elsewhere).
  int64_t rank = 0;
  std::vector<StateCommand> commands;
};

}  // namespace sc::props
