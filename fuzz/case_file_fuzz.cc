// Fuzz target: case files (shardcheck-replay FILE). Any text must parse or throw CaseFileError
// naming the field; a parsed case must survive to_json and parse_case_file unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "properties/case_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  sc::props::CaseFile file;
  try {
    file = sc::props::parse_case_file(text);
  } catch (const sc::props::CaseFileError& e) {
    if (std::string(e.what()).empty()) std::abort();
    return 0;
  }
  sc::props::CaseFile again;
  try {
    again = sc::props::parse_case_file(sc::props::to_json(file));
  } catch (const sc::props::CaseFileError&) {
    std::abort();  // what to_json writes must parse
  }
  if (again.property != file.property || again.variant != file.variant ||
      !sc::props::same_inputs(again.inputs, file.inputs)) {
    std::abort();
  }
  return 0;
}
