// Every property of the suite, registered once: its name, its claim, how it draws its inputs and
// checks them, what it runs against, and the variants and mutants known to break it. The gtest
// cases (properties/properties_test.cc), the mutation score, the replay tool, the kill tests and
// the table of docs/properties.md (checked by tests/registry_test.cc) all come from this list.
//
// A replayable property draws its inputs into a CaseInputs and runs its `check` on them; when
// the check fails it writes the case file (properties/case_file.h) and RC_LOGs its path, the
// JSON and the replay command, which RapidCheck prints with the shrunk case.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "properties/property.h"
#include "sim/port/behaviour.h"
#include "sim/rig/capabilities.h"

namespace sc::props {

// Every property, in a fixed order: model laws, shard builder, hybrid optimizer, checkpoints,
// then the stream properties (the dearest per case).
const std::vector<Property>& all_properties();
// The property called `name`, or nullptr.
const Property* find_property(std::string_view name);
// The properties that run against the variant under test on the port, in order: what the
// mutation score runs against each mutant.
std::vector<const Property*> variant_properties();
// Why `p` does not run with real Megatron code as the system under test: its own reason, or each
// capability it needs that the megatron target does not serve; empty when it runs.
std::string why_not_on_real_code(const Property& p);
// Whether `p` runs with real Megatron code as the system under test.
bool runs_on_real_code(const Property& p);
// The table of docs/properties.md (property, claim, killed by, against real code), in markdown.
std::string property_table_markdown();
// The mutants' table of docs/variants-and-mutants.md: each mutant of the deviation table, the
// variant it is built on, the bug it re-injects, and the properties that name it as a killer.
std::string mutant_table_markdown();

// Where failing properties write case files: $SC_CASE_DIR, else "shardcheck-cases" under the
// system's temporary directory.
std::string case_file_dir();

}  // namespace sc::props
