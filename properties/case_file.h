// Case files: one generated case of a model-versus-port property (the CaseSpec, the step
// schedule and the property's own draws, properties/case_extras.h), the property's name and the
// variant, as JSON text, so that a failure replays from the file alone (shardcheck-replay,
// cases/README.md).
//
// to_json() and parse_case_file() are inverse: parsing what to_json wrote gives an equal case.
// parse_case_file() rejects unknown keys, missing keys and wrong types with the JSON path of the
// field ("case.params[0].dtype: ...").
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/spec.h"
#include "properties/case_file_error.h"
#include "properties/gen/case_inputs.h"

namespace sc::props {

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
  // The extras of `inputs` it holds (properties/case_extras.h), by key: its property's
  // (Property::extras) when recorded, the keys present when parsed.
  std::vector<std::string> extras;
};

// The case file as indented JSON text.
std::string to_json(const CaseFile& file);
// Parses JSON text written by to_json (or by hand); throws CaseFileError.
CaseFile parse_case_file(const std::string& text);
// True when the two cases are equal field by field (doubles compared exactly).
bool same_inputs(const CaseInputs& first, const CaseInputs& second);

}  // namespace sc::props
