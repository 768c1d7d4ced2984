// JUnit XML of shardcheck-verify's runs, which GitLab CI and GitHub Actions read: one testsuite
// per tree, one testcase per property (classname its suite, name the rest), a failure with the
// property's words, its case and the command that replays it, a skipped entry with the reason a
// property does not run there. A review's testcase fails when the property is newly failing.
#pragma once

#include <string>
#include <vector>

#include "properties/verify_report.h"

namespace sc::props {

std::string junit_xml(const TreeRun& run, const std::vector<const Property*>& not_on_real_code);
std::string junit_xml(const Review& review, const std::vector<const Property*>& not_on_real_code);

}  // namespace sc::props
