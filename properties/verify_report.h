// What shardcheck-verify prints: one run of the property table against a Megatron tree, or a
// review (the same table with the same seed on a tree before and after a patch).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/registry.h"
#include "properties/run.h"

namespace sc::props {

// One property's outcome against one tree.
struct Outcome {
  const Property* property = nullptr;
  RunOutcome run;
  bool not_run = false;     // left out: by a reproduce string (RC_PARAMS="reproduce=..."), or
                            // beside a control, which its cases cannot be run on first
  std::string why_not_run = "not in the reproduce string";
  std::string case_file;    // the shrunk case's file, when the property writes one
  std::string replay;       // the one command that replays the failure against the same tree
  double seconds = 0;       // wall time of its run
  bool failed() const { return !not_run && run.kind != RunOutcome::Kind::kPassed; }
};

// A tree as the report names it.
struct TreeRun {
  std::string name;    // the tree as the user named it
  std::string commit;  // empty when unknown
  std::vector<std::string> patches;  // paths, in the order applied
  std::vector<Outcome> outcomes;
  // The port's variant beside the real-ranks properties and the differential, and their cases
  // (0: RC_PARAMS's); empty when they were left out of the run.
  std::string real_ranks;
  int real_ranks_cases = 0;
};

// The run's header, every property with its failure, the properties that do not run against real
// code, and a summary table.
void print_run(std::ostream& out, const TreeRun& run, const std::vector<std::string>& stand_ins,
               const std::vector<const Property*>& not_on_real_code);
nlohmann::json run_json(const TreeRun& run, const std::vector<std::string>& stand_ins,
                        const std::vector<const Property*>& not_on_real_code);

// A review's verdict on one property.
enum class Verdict { kNewlyFailing, kFixed, kStillFailing, kPassesBoth, kNotRun };
Verdict verdict_of(const Outcome& before, const Outcome& after);
const char* verdict_text(Verdict v);

struct ReviewedProperty {
  Outcome before, after;
  Verdict verdict = Verdict::kNotRun;
  std::vector<std::string> findings;  // known findings whose regression case fails after
};

struct Review {
  TreeRun before, after;  // outcomes unused: see properties
  std::string fix;        // the patch under review
  std::vector<std::string> left_out;  // base patches left out, each with why
  std::vector<std::string> claims;    // --fixes FN
  std::vector<std::string> claim_failures;  // why a claim does not hold, one line each
  std::vector<ReviewedProperty> properties;
  bool failed() const;  // anything newly failing, or a claim that does not hold
};

// The claim that the fix fixes `finding`, decided by what that finding's own regression cases
// show: `cases` holds, per case that runs against real code, its property and whether it still
// fails with the fix (none: its Megatron-style test decides). A case's property failing after
// the fix breaks the claim too, unless that failure is a known other finding's (the property's
// `findings`, whose regression cases reproduce it, the claimed one not among them), which a base
// that had to leave that finding's patch out keeps: the claim then holds and names it as still
// failing. Adds to `review.claims` and `review.claim_failures`.
void judge_claim(Review& review, const std::string& finding,
                 const std::vector<std::pair<std::string, bool>>& cases);

void print_review(std::ostream& out, const Review& review,
                  const std::vector<const Property*>& not_on_real_code);
nlohmann::json review_json(const Review& review,
                           const std::vector<const Property*>& not_on_real_code);

// The parameters of a case file as a table (name, shape, dtype, marks) under its configuration
// line, each line indented by `indent`; "" when the file cannot be read.
std::string case_table(const std::string& case_file, const std::string& indent);

}  // namespace sc::props
