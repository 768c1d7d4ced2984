// The inputs at the optimizer's boundary that Megatron's training loop, its checkpoint loader or a
// direct caller of DistributedOptimizer / HybridDeviceOptimizer can produce, and for each whether
// the generators draw it: drawn ones name their draw (properties/gen/case_draws.h) and a
// predicate over what it draws, so that a test measures how often the draw produces the input and
// fails when it stops; the others say why not. docs/properties.md's input audit is this table
// (Registry.TheInputAuditIsTheGeneratorsDeclarations).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "properties/gen/case_inputs.h"

namespace sc::props {

struct InputDimension {
  std::string kind;       // per parameter, per step, per group, configuration, checkpoint, ...
  std::string dimension;  // the input, as Megatron produces it
  // Drawn: the draw, by name; one input drawn as that draw draws it, and whether it has the
  // dimension (called inside a RapidCheck property); the least share of draws that must have it.
  std::string generator;
  std::function<bool()> sample;
  double min_rate = 0;
  // Not drawn: why, and what it leaves unseen (history patches, findings).
  std::string why_not;
};

// Every dimension, in the order of the table.
const std::vector<InputDimension>& input_dimensions();

// The table of docs/properties.md; `measured` maps a drawn dimension to its measured share.
std::string input_audit_markdown(const std::map<std::string, double>& measured);

}  // namespace sc::props
