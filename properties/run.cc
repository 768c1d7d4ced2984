#include "properties/run.h"

#include <sstream>

#include <unordered_map>

#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

namespace rc::detail {
// RapidCheck's own encoding of reproduce strings (defined in the library, not in its headers).
std::string reproduceMapToString(const std::unordered_map<std::string, Reproduce>& map);
}  // namespace rc::detail

namespace sc::props {

RunOutcome run_property(const std::function<void()>& body, const RunOptions& options) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  if (options.seed) params.seed = *options.seed;
  if (options.max_success) params.maxSuccess = *options.max_success;
  if (!options.shrink) params.disableShrinking = true;
  rc::detail::TestMetadata metadata;
  metadata.id = options.id;
  metadata.description = options.id;
  rc::detail::TestListenerAdapter silent;
  const rc::detail::TestResult result =
      options.rapidcheck_listener
          ? rc::detail::checkTestable([&body] { body(); }, metadata, params)
          : rc::detail::checkTestable([&body] { body(); }, metadata, params, silent,
                                      rc::detail::configuration().reproduce);
  RunOutcome out;
  std::ostringstream report;
  rc::detail::printResultMessage(result, report);
  out.report = report.str();
  rc::detail::SuccessResult success;
  rc::detail::FailureResult failure;
  rc::detail::GaveUpResult gave_up;
  if (result.match(failure)) {
    out.kind = RunOutcome::Kind::kFailed;
    out.cases = failure.numSuccess + 1;
    out.shrunk_size = failure.counterExample.size();
    out.description = failure.description;
    for (const auto& [type, value] : failure.counterExample) {
      out.counterexample += type + ": " + value + "\n";
    }
    out.reproduce = rc::detail::reproduceMapToString({{options.id, failure.reproduce}});
  } else if (result.match(gave_up)) {
    out.kind = RunOutcome::Kind::kGaveUp;
    out.cases = gave_up.numSuccess;
    out.description = gave_up.description;
  } else if (result.match(success)) {
    out.cases = success.numSuccess;
  }
  return out;
}

}  // namespace sc::props
