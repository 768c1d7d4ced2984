// The inputs a replayable property draws beyond the case and the schedule (CaseInputs' extras),
// one row each: its key in a case file, what it means, and how it is written, read back
// (validated against what was read before it) and compared. A property names the extras it draws
// beside its body (Property::extras, properties/registry.cc); its case files write those and no
// other, and a case file may hold any (files of earlier releases wrote "split" and
// "other_fraction" for every property). Adding a property with a new input costs its field of
// CaseInputs, its row here and its name at its registration.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "properties/case_json.h"
#include "properties/gen/case_inputs.h"

namespace sc::props {

struct CaseExtra {
  std::string key;
  std::string doc;  // one line: what the property drew
  // The value to write, or null to leave the key out (a value that reads back as absent).
  std::function<json(const CaseInputs&)> write;
  // Reads the key from the case file's top-level object into `in` (its case and schedule and the
  // extras of earlier rows already read); throws CaseFileError naming the field.
  std::function<void(CaseReader&, CaseInputs&)> read;
  std::function<bool(const CaseInputs&, const CaseInputs&)> same;
};

// Every extra, in the order a case file writes them.
const std::vector<CaseExtra>& case_extras();
// The extra called `key`, or nullptr.
const CaseExtra* find_case_extra(std::string_view key);

// The command's name in case files ("Step", "SetLr", "Rebuild+LoadState", ...).
std::string command_name(const StateCommand& command);

}  // namespace sc::props
