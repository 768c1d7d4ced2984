#include "properties/run.h"

#include <sstream>

#include <rapidcheck.h>

namespace sc::props {

RunOutcome run_property(const std::function<void()>& body, const RunOptions& options) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  if (options.seed) params.seed = *options.seed;
  if (options.max_success) params.maxSuccess = *options.max_success;
  if (!options.shrink) params.disableShrinking = true;
  rc::detail::TestMetadata metadata;
  metadata.id = options.id;
  metadata.description = options.id;
  const rc::detail::TestResult result =
      rc::detail::checkTestable([&body] { body(); }, metadata, params);
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
