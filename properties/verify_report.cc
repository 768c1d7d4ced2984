#include "properties/verify_report.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "properties/case_file.h"
#include "properties/gen/case_gen.h"
#include "properties/support.h"
#include "sim/input/args.h"

namespace sc::props {

namespace {

using nlohmann::json;

std::string base_name(const std::string& path) {
  return path.substr(path.find_last_of('/') + 1);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return in ? s.str() : "";
}

// RapidCheck's failure text without its boilerplate: the lines the property logged (less the
// case file's, printed on its own) and, when it logged none, the assertion and where it failed.
std::string lines_of(const std::string& text, const std::string& indent) {
  std::istringstream in(text);
  std::string out, line;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("case file: ", 0) == 0 || line.rfind("replay: ", 0) == 0) {
      continue;
    }
    out += indent + line + "\n";
  }
  return out;
}

std::string failure_lines(const std::string& description, const std::string& indent) {
  const size_t log = description.find("\nLog:\n");
  if (log == std::string::npos) return lines_of(description, indent);
  const std::string logged = lines_of(description.substr(log + 6), indent);
  return logged.empty() ? lines_of(description.substr(0, log), indent) : logged;
}

// "[8x8]"
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? "x" : "") + std::to_string(shape[d]);
  return s + "]";
}

std::string marks_text(const model::ParamSpec& p) {
  std::string s = "group " + std::to_string(p.group) + ", chunk " + std::to_string(p.chunk);
  if (p.keep_in_fp32) s += ", keep_in_fp32";
  if (p.is_expert) s += ", expert";
  if (p.shared_embedding) s += ", shared_embedding";
  return s;
}

// The steps or commands of a case, numbered from 1 as the failure messages count them.
std::string sequence_text(const json& file, const std::string& indent) {
  std::ostringstream out;
  if (file.contains("commands")) {
    out << indent << "rank " << file.value("rank", 0) << ", commands:";
    int k = 0, step = 0;
    for (const json& c : file["commands"]) {
      const std::string name = c.value("command", "?");
      out << (k > 0 ? "," : "") << " " << k + 1 << " " << name;
      ++k;
      if (name == "Step") out << " (step " << ++step << ")";
    }
    out << "\n";
  } else if (!file["schedule"].empty()) {
    out << indent << file["schedule"].size() << " steps";
    if (file.value("split", 0) > 0) out << ", checkpoint after step " << file["split"];
    if (file.value("other_fraction", 0.0) > 0.0 || file.value("property", "").find("Fraction") !=
                                                       std::string::npos) {
      out << ", compared against offload fraction " << file.value("other_fraction", 0.0);
    }
    out << "\n";
  }
  return out.str();
}

void print_failure(std::ostream& out, const Outcome& o) {
  const std::string table = o.case_file.empty() ? "" : case_table(o.case_file, "    ");
  if (!table.empty()) {
    out << "  case:\n" << table;
  } else {
    out << "  counterexample:\n";
    std::istringstream lines(o.run.counterexample);
    for (std::string line; std::getline(lines, line);) out << "    " << line << "\n";
  }
  out << "  failure:\n" << failure_lines(o.run.description, "    ");
  if (!o.case_file.empty()) out << "  case file: " << o.case_file << "\n";
  out << "  replay: " << o.replay << "\n";
}

const char* run_verdict(const Outcome& o) {
  if (o.not_run) return "NOT RUN";
  if (o.run.kind == RunOutcome::Kind::kGaveUp) return "GAVE UP";
  return o.failed() ? "FAIL" : "PASS";
}

json outcome_json(const Outcome& o) {
  if (o.not_run) return {{"ran", false}, {"why", o.why_not_run}};
  json j{{"ran", true}, {"passed", !o.failed()}, {"cases", o.run.cases}, {"seconds", o.seconds}};
  if (!o.failed()) return j;
  j["failure"] = o.run.description;
  j["counterexample"] = o.run.counterexample;
  j["replay"] = o.replay;
  j["reproduce"] = o.run.reproduce;  // RC_PARAMS="reproduce=..." reruns this property alone
  j["case_file"] = o.case_file.empty() ? json(nullptr) : json(o.case_file);
  const std::string text = o.case_file.empty() ? "" : read_text(o.case_file);
  j["case"] = text.empty() ? json(nullptr) : json::parse(text, nullptr, false);
  return j;
}

json tree_json(const TreeRun& run) {
  json out = {{"tree", run.name},
              {"commit", run.commit.empty() ? json(nullptr) : json(run.commit)},
              {"patches", run.patches}};
  if (!run.real_ranks.empty()) {
    out["real_ranks"] = {{"variant", run.real_ranks}, {"cases", run.real_ranks_cases}};
  }
  return out;
}

json not_run_json(const std::vector<const Property*>& not_on_real_code) {
  json skipped = json::array();
  for (const Property* p : not_on_real_code) {
    skipped.push_back({{"name", p->name}, {"why", why_not_on_real_code(*p)}});
  }
  return skipped;
}

void print_tree(std::ostream& out, const char* label, const TreeRun& run) {
  out << label << real_code_label(run.name, run.patches) << " (" << run.name
      << (run.commit.empty() ? "" : " at " + run.commit) << ")\n";
  if (!run.real_ranks.empty()) {
    out << "real ranks and the differential: the port beside them as " << run.real_ranks;
    if (run.real_ranks_cases > 0) out << ", " << run.real_ranks_cases << " cases each";
    out << "\n";
  }
}

size_t name_width(const std::vector<Outcome>& outcomes) {
  size_t w = 8;
  for (const Outcome& o : outcomes) w = std::max(w, o.property->name.size());
  return w;
}

}  // namespace

std::string case_table(const std::string& case_file, const std::string& indent) {
  const std::string text = read_text(case_file);
  if (text.empty()) return "";
  CaseFile f;
  try {
    f = parse_case_file(text);
  } catch (const CaseFileError&) {
    return "";
  }
  std::ostringstream config;
  model::showValue(f.inputs.c, config);
  std::string line = config.str();
  line = line.substr(0, line.find(" params=[")) + "}";
  std::ostringstream out;
  out << indent << line << "\n";
  size_t wn = 4, ws = 5;
  for (const model::ParamSpec& p : f.inputs.c.params) {
    wn = std::max(wn, p.name.size());
    ws = std::max(ws, shape_text(p.shape).size());
  }
  out << indent << std::left << std::setw(static_cast<int>(wn) + 2) << "name"
      << std::setw(static_cast<int>(ws) + 2) << "shape" << std::setw(7) << "dtype" << "marks\n";
  for (const model::ParamSpec& p : f.inputs.c.params) {
    out << indent << std::setw(static_cast<int>(wn) + 2) << p.name
        << std::setw(static_cast<int>(ws) + 2) << shape_text(p.shape) << std::setw(7)
        << model::dtype_name(p.dtype) << marks_text(p) << "\n";
  }
  out << sequence_text(json::parse(text, nullptr, false), indent);
  return out.str();
}

void print_run(std::ostream& out, const TreeRun& run, const std::vector<std::string>& stand_ins,
               const std::vector<const Property*>& not_on_real_code) {
  print_tree(out, "tree ", run);
  out << "stand-ins (not Megatron's code):\n";
  for (const std::string& s : stand_ins) out << "  - " << s << "\n";
  for (const Outcome& o : run.outcomes) {
    if (o.not_run) {
      out << "NOT RUN  " << o.property->name << ": " << o.why_not_run << "\n";
      continue;
    }
    out << run_verdict(o) << "  " << o.property->name << "  (" << o.run.cases << " cases)\n";
    if (o.failed()) print_failure(out, o);
  }
  for (const Property* p : not_on_real_code) {
    out << "NOT RUN  " << p->name << ": " << why_not_on_real_code(*p) << "\n";
  }
  int passed = 0, failed = 0, left_out = 0;
  const int w = static_cast<int>(name_width(run.outcomes)) + 2;
  out << "\nsummary\n  " << std::left << std::setw(w) << "property" << "verdict  cases\n";
  for (const Outcome& o : run.outcomes) {
    (o.not_run ? left_out : o.failed() ? failed : passed) += 1;
    out << "  " << std::setw(w) << o.property->name << std::setw(9) << run_verdict(o)
        << (o.not_run ? "" : std::to_string(o.run.cases)) << "\n";
  }
  out << "summary: " << passed << " passed, " << failed << " failed or gave up, "
      << not_on_real_code.size() + left_out << " not run\n";
}

json run_json(const TreeRun& run, const std::vector<std::string>& stand_ins,
              const std::vector<const Property*>& not_on_real_code) {
  json properties = json::array(), skipped = not_run_json(not_on_real_code);
  int passed = 0, failed = 0;
  for (const Outcome& o : run.outcomes) {
    if (o.not_run) {
      skipped.push_back({{"name", o.property->name}, {"why", o.why_not_run}});
      continue;
    }
    (o.failed() ? failed : passed) += 1;
    json j = outcome_json(o);
    j.erase("ran");
    j["name"] = o.property->name;
    properties.push_back(j);
  }
  json out = tree_json(run);
  out["properties"] = properties;
  out["passed"] = passed;
  out["failed"] = failed;
  out["not_run"] = skipped;
  out["stand_ins"] = stand_ins;
  return out;
}

Verdict verdict_of(const Outcome& before, const Outcome& after) {
  if (before.not_run || after.not_run) return Verdict::kNotRun;
  if (after.failed()) return before.failed() ? Verdict::kStillFailing : Verdict::kNewlyFailing;
  return before.failed() ? Verdict::kFixed : Verdict::kPassesBoth;
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::kNewlyFailing:
      return "newly failing";
    case Verdict::kFixed:
      return "fixed by the patch";
    case Verdict::kStillFailing:
      return "still failing";
    case Verdict::kPassesBoth:
      return "passes both";
    case Verdict::kNotRun:
      return "not run";
  }
  return "?";
}

bool Review::failed() const {
  return !claim_failures.empty() ||
         std::any_of(properties.begin(), properties.end(), [](const ReviewedProperty& p) {
           return p.verdict == Verdict::kNewlyFailing;
         });
}

namespace {

// The failures of `case_property` after the fix: those another finding explains ("F15
// (Suite.Name)") go to `others`, the rest break the claim.
void judge_case_property(Review& review, const std::string& finding,
                         const std::string& case_property, std::vector<std::string>& others) {
  for (const ReviewedProperty& p : review.properties) {
    if (p.after.property->name != case_property || !p.after.failed()) continue;
    const bool explained =
        p.verdict == Verdict::kStillFailing && !p.findings.empty() &&
        std::find(p.findings.begin(), p.findings.end(), finding) == p.findings.end();
    const std::string other = input::join(p.findings, ", ") + " (" + case_property + ")";
    if (!explained) {
      review.claim_failures.push_back(finding + ": " + case_property + " is " +
                                      verdict_text(p.verdict));
    } else if (std::find(others.begin(), others.end(), other) == others.end()) {
      others.push_back(other);
    }
  }
}

}  // namespace

void judge_claim(Review& review, const std::string& finding,
                 const std::vector<std::pair<std::string, bool>>& cases) {
  std::vector<std::string> others;
  for (const auto& [property, fails] : cases) {
    if (fails) {
      review.claim_failures.push_back(finding + ": its regression case (" + property +
                                      ") still fails with the patch");
    }
    judge_case_property(review, finding, property, others);
  }
  std::string claim = finding;
  if (cases.empty()) {
    claim += " (no regression case of it runs against real code; its Megatron-style test "
             "decides it)";
  }
  if (!others.empty()) claim += "; still failing: " + input::join(others, "; ");
  review.claims.push_back(claim);
}

void print_review(std::ostream& out, const Review& review,
                  const std::vector<const Property*>& not_on_real_code) {
  out << "review of " << base_name(review.fix) << "\n";
  print_tree(out, "before: ", review.before);
  print_tree(out, "after:  ", review.after);
  for (const std::string& l : review.left_out) out << "left out of the base: " << l << "\n";
  // Regressions first, with their case; then what the patch fixed, then what it left.
  for (const Verdict v : {Verdict::kNewlyFailing, Verdict::kFixed, Verdict::kStillFailing,
                          Verdict::kPassesBoth, Verdict::kNotRun}) {
    for (const ReviewedProperty& p : review.properties) {
      if (p.verdict != v) continue;
      std::string upper = verdict_text(v);
      std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
      out << upper << "  " << p.after.property->name;
      if (v == Verdict::kFixed) out << "  (failed at case " << p.before.run.cases << " before)";
      if (v != Verdict::kNotRun) out << "  (" << p.after.run.cases << " cases after)";
      if (v == Verdict::kNotRun) out << ": not in the reproduce string";
      if (!p.findings.empty()) {
        out << "  reproduces the regression case of " << input::join(p.findings, ", ");
      }
      out << "\n";
      if (v == Verdict::kNewlyFailing || v == Verdict::kStillFailing) print_failure(out, p.after);
    }
  }
  for (const Property* p : not_on_real_code) {
    out << "NOT RUN  " << p->name << ": " << why_not_on_real_code(*p) << "\n";
  }
  for (const std::string& c : review.claims) out << "claims to fix " << c << "\n";
  for (const std::string& why : review.claim_failures) out << "CLAIM NOT MET  " << why << "\n";
  int counts[5] = {0, 0, 0, 0, 0};
  for (const ReviewedProperty& p : review.properties) ++counts[static_cast<int>(p.verdict)];
  out << "summary: " << counts[0] << " newly failing, " << counts[1] << " fixed by the patch, "
      << counts[2] << " still failing, " << counts[3] << " pass both, "
      << counts[4] + not_on_real_code.size() << " not run\n";
  out << "verdict: ";
  if (!review.failed()) out << "nothing newly failing";
  if (counts[0] > 0) out << counts[0] << " newly failing";
  if (counts[0] > 0 && !review.claim_failures.empty()) out << "; ";
  if (!review.claim_failures.empty()) out << review.claim_failures.size() << " claims not met";
  out << "\n";
}

json review_json(const Review& review, const std::vector<const Property*>& not_on_real_code) {
  json properties = json::array();
  for (const ReviewedProperty& p : review.properties) {
    properties.push_back({{"name", p.after.property->name},
                          {"verdict", verdict_text(p.verdict)},
                          {"findings", p.findings},
                          {"before", outcome_json(p.before)},
                          {"after", outcome_json(p.after)}});
  }
  return {{"fix", review.fix},
          {"before", tree_json(review.before)},
          {"after", tree_json(review.after)},
          {"left_out", review.left_out},
          {"claims", review.claims},
          {"claim_failures", review.claim_failures},
          {"properties", properties},
          {"not_run", not_run_json(not_on_real_code)},
          {"failed", review.failed()}};
}

}  // namespace sc::props
