// Case files: one generated case of a model-versus-port property (the CaseSpec, the step
// schedule and the property's own draws), the property's name and the variant, as JSON text,
// so that a failure replays from the file alone (shardcheck-replay, cases/README.md).
//
// to_json() and parse_case_file() are inverse: parsing what to_json wrote gives an equal case.
// parse_case_file() rejects unknown keys, missing keys and wrong types with the JSON path of the
// field ("case.params[0].dtype: ...").
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
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

// The command's name in case files ("Step", "SetLr", "Rebuild+LoadState", ...).
std::string command_name(const StateCommand& command);

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

// The real code a case was recorded against: the tree as its user named it (a folder or a
// .tar.gz), its commit where known, and the patches applied to a copy of it, in order.
struct RealCodeSource {
  std::string tree;
  std::string commit;  // empty when unknown
  std::vector<std::string> patches;
};

// One case file.
struct CaseFile {
  std::string property;  // "Suite.Name"; may be empty (then replay needs --property)
  std::string variant;   // a variant or mutant name; may be empty (the fully patched one)
  CaseInputs inputs;
  // Set when the case failed against real Megatron code (key "megatron"): it replays there
  // (scripts/verify-megatron --case FILE), not on the port.
  std::optional<RealCodeSource> megatron;
};

// A malformed case file: what() names the field.
struct CaseFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The case file as indented JSON text.
std::string to_json(const CaseFile& file);
// Parses JSON text written by to_json (or by hand); throws CaseFileError.
CaseFile parse_case_file(const std::string& text);
// True when the two cases are equal field by field (doubles compared exactly).
bool same_inputs(const CaseInputs& first, const CaseInputs& second);

}  // namespace sc::props
