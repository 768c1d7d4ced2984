#include "properties/junit.h"

#include <cstdio>
#include <sstream>

#include "properties/support.h"
#include "sim/picture/svg.h"

namespace sc::props {

namespace {

// One testcase: the property's suite and name, its time, and its failure or skip, if any.
struct Case {
  std::string name;
  double seconds = 0;
  std::string failure;  // the message's first line, then the body
  std::string body;
  std::string skipped;  // why the property did not run
};

std::string attribute(const std::string& text) {
  const size_t line = text.find('\n');
  return sc::picture::xml_escape(line == std::string::npos ? text : text.substr(0, line));
}

void write_case(std::ostream& out, const Case& c) {
  const size_t dot = c.name.find('.');
  char time[32];
  std::snprintf(time, sizeof time, "%.3f", c.seconds);
  out << "    <testcase classname=\"" << sc::picture::xml_escape(c.name.substr(0, dot))
      << "\" name=\""
      << sc::picture::xml_escape(dot == std::string::npos ? c.name : c.name.substr(dot + 1))
      << "\" time=\"" << time << "\"";
  if (c.failure.empty() && c.skipped.empty()) {
    out << "/>\n";
    return;
  }
  out << ">\n";
  if (!c.failure.empty()) {
    out << "      <failure message=\"" << attribute(c.failure) << "\">"
        << sc::picture::xml_escape(c.body) << "</failure>\n";
  } else {
    out << "      <skipped message=\"" << attribute(c.skipped) << "\"/>\n";
  }
  out << "    </testcase>\n";
}

std::string failure_body(const Outcome& o) {
  return o.run.description + "\n\ncase:\n" + o.run.counterexample + "\nreplay: " + o.replay + "\n";
}

Case case_of(const Outcome& o) {
  Case c{o.property->name, o.seconds, "", "", ""};
  if (o.not_run) {
    c.skipped = o.why_not_run;
  } else if (o.failed()) {
    c.failure = o.run.description.empty() ? "failed" : o.run.description;
    c.body = failure_body(o);
  }
  return c;
}

std::string document(const std::string& suite, const std::vector<Case>& cases) {
  int failures = 0, skipped = 0;
  double seconds = 0;
  for (const Case& c : cases) {
    failures += c.failure.empty() ? 0 : 1;
    skipped += c.skipped.empty() || !c.failure.empty() ? 0 : 1;
    seconds += c.seconds;
  }
  std::ostringstream out;
  const std::string counts = "tests=\"" + std::to_string(cases.size()) + "\" failures=\"" +
                             std::to_string(failures) + "\" errors=\"0\" skipped=\"" +
                             std::to_string(skipped) + "\"";
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<testsuites name=\"shardcheck-verify\" " << counts << ">\n"
      << "  <testsuite name=\"" << sc::picture::xml_escape(suite) << "\" " << counts << " time=\""
      << seconds << "\">\n";
  for (const Case& c : cases) write_case(out, c);
  out << "  </testsuite>\n</testsuites>\n";
  return out.str();
}

void add_not_run(std::vector<Case>& cases, const std::vector<const Property*>& not_on_real_code) {
  for (const Property* p : not_on_real_code) {
    cases.push_back({p->name, 0, "", "", why_not_on_real_code(*p)});
  }
}

}  // namespace

std::string junit_xml(const TreeRun& run, const std::vector<const Property*>& not_on_real_code) {
  std::vector<Case> cases;
  for (const Outcome& o : run.outcomes) cases.push_back(case_of(o));
  add_not_run(cases, not_on_real_code);
  return document("megatron " + real_code_label(run.name, run.patches), cases);
}

std::string junit_xml(const Review& review, const std::vector<const Property*>& not_on_real_code) {
  std::vector<Case> cases;
  for (const ReviewedProperty& p : review.properties) {
    Case c = case_of(p.after);
    if (p.verdict != Verdict::kNewlyFailing && !c.failure.empty()) {
      c.failure.clear();  // failing before the fix as well: what a review reports, not a failure
      c.body.clear();
    }
    if (p.verdict == Verdict::kNotRun) c.skipped = "not in the reproduce string";
    c.seconds += p.before.seconds;
    cases.push_back(c);
  }
  for (const std::string& claim : review.claim_failures) {
    cases.push_back({"Claim.NotMet", 0, claim, claim, ""});
  }
  add_not_run(cases, not_on_real_code);
  return document("review of " + review.fix + " on megatron " +
                      real_code_label(review.before.name, review.before.patches),
                  cases);
}

}  // namespace sc::props
