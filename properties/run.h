// One way to run a property under RapidCheck, for every caller (the gtest cases, the mutation
// score, the replay tool, the kill, shrink, coverage and case-file tests): RapidCheck's
// configured parameters (RC_PARAMS) with the caller's overrides, and an outcome that says what
// happened, with RapidCheck's own report (the seed, the shrunk case, the reproduce string).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace sc::props {

struct RunOptions {
  // "Suite/Name": RC_PARAMS's reproduce strings for this id replay the shrunk case.
  std::string id;
  std::optional<uint64_t> seed;     // else RC_PARAMS's
  std::optional<int> max_success;   // else RC_PARAMS's
  bool shrink = true;
  // RapidCheck's own listener, which prints every failure's reproduce string again when the
  // program exits; a tool that prints its own replay line for each failure turns it off.
  bool rapidcheck_listener = true;
};

struct RunOutcome {
  enum class Kind { kPassed, kFailed, kGaveUp };
  Kind kind = Kind::kPassed;
  int cases = 0;             // cases run: up to and including the failing one
  size_t shrunk_size = 0;    // values drawn for the shrunk counterexample
  std::string description;   // the failure (with its RC_LOG lines) or why it gave up
  std::string counterexample;  // the shrunk counterexample, one "type: value" per drawn value
  std::string reproduce;       // RC_PARAMS's reproduce string for the shrunk case
  std::string report;        // RapidCheck's whole message
  bool failed() const { return kind == Kind::kFailed; }
};

// Runs `body` (which draws with `*gen` and checks with RC_ASSERT) as RapidCheck cases.
RunOutcome run_property(const std::function<void()>& body, const RunOptions& options = {});

}  // namespace sc::props
