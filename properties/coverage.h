// Coverage classes of generated cases: the edge dimensions along which a case of the distributed
// optimizer can be unusual, computed from the CaseSpec and the model's layout and shard plan.
//
// coverage_classes() is a pure function of the case, so that the properties label every case
// with it (tag_coverage) and a test can measure how often the generator hits each class.
#pragma once

#include <string>
#include <vector>

#include "model/spec.h"

namespace sc::props {

// Every coverage class, by name, in a fixed order.
const std::vector<std::string>& coverage_class_names();
// The classes `spec` falls in: a subset of coverage_class_names(), in the same order.
std::vector<std::string> coverage_classes(const model::CaseSpec& spec);
// RC_CLASSIFY of every class of coverage_class_names() for `spec`; call inside a property.
void tag_coverage(const model::CaseSpec& spec);

}  // namespace sc::props
