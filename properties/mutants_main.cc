// shardcheck-mutants: runs the property suite against every mutant (a known bug re-injected into
// the fully patched port) and prints which property kills it, after how many cases, how small
// the shrunk counterexample is, how long it took, and the mutation score.
//
//   shardcheck-mutants [--only=NAME] [--max-success=N] [--seed=N] [--json]
//
// Exit status: 0 when every mutant is killed, 1 when one survives, 2 on bad arguments.
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "properties/property_table.h"

namespace {

struct Outcome {
  std::string name;
  bool killed = false;
  std::string property;
  int cases = 0;         // cases run until the failing one, that one included
  size_t shrunk_size = 0;  // values RapidCheck drew for the shrunk counterexample
  double seconds = 0;
};

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::strtoull(s.c_str(), nullptr, 10);
  return true;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  std::string only;
  uint64_t max_success = 200, seed = 1;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a.rfind("--only=", 0) == 0) {
      only = a.substr(7);
    } else if (a.rfind("--max-success=", 0) == 0 && parse_u64(a.substr(14), max_success) &&
               max_success > 0) {
    } else if (a.rfind("--seed=", 0) == 0 && parse_u64(a.substr(7), seed)) {
    } else {
      std::cerr << "shardcheck-mutants: bad argument '" << a
                << "' (use --only=NAME --max-success=N --seed=N --json)\n";
      return 2;
    }
  }
  std::vector<sc::sut::Behaviour> mutants;
  for (const auto& m : sc::sut::all_mutants()) {
    if (only.empty() || m.name == only) mutants.push_back(m);
  }
  if (mutants.empty()) {
    std::cerr << "shardcheck-mutants: no mutant named '" << only << "'\n";
    return 2;
  }
  std::vector<Outcome> outcomes;
  for (const auto& m : mutants) {
    Outcome o;
    o.name = m.name;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& p : sc::props::diff_properties()) {
      rc::detail::TestParams params;
      params.seed = seed;
      params.maxSuccess = static_cast<int>(max_success);
      const auto& body = p.body;
      const rc::detail::TestResult r =
          rc::detail::checkTestable([&] { body(m); }, rc::detail::TestMetadata{}, params);
      rc::detail::FailureResult failure;
      rc::detail::GaveUpResult gave_up;
      if (r.match(gave_up)) {
        std::cerr << "shardcheck-mutants: " << p.name << " gave up on " << m.name << ": "
                  << gave_up.description << "\n";
      }
      if (r.match(failure)) {
        o.killed = true;
        o.property = p.name;
        o.cases = failure.numSuccess + 1;
        o.shrunk_size = failure.counterExample.size();
        break;
      }
    }
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    outcomes.push_back(o);
  }
  size_t killed = 0;
  for (const auto& o : outcomes) killed += o.killed ? 1 : 0;
  const double score = static_cast<double>(killed) / static_cast<double>(outcomes.size());
  if (json) {
    std::cout << "{\"score\": " << score << ", \"seed\": " << seed
              << ", \"max_success\": " << max_success << ", \"mutants\": [";
    for (size_t i = 0; i < outcomes.size(); ++i) {
      const Outcome& o = outcomes[i];
      std::cout << (i ? ", " : "") << "{\"name\": " << quoted(o.name)
                << ", \"killed\": " << (o.killed ? "true" : "false")
                << ", \"property\": " << (o.killed ? quoted(o.property) : "null")
                << ", \"cases\": " << o.cases << ", \"shrunk_size\": " << o.shrunk_size
                << ", \"seconds\": " << std::setprecision(3) << o.seconds << "}";
    }
    std::cout << "]}\n";
  } else {
    std::cout << "SEED=" << seed << " max_success=" << max_success << "\n";
    std::cout << std::left << std::setw(29) << "mutant" << std::setw(8) << "killed"
              << std::setw(70) << "property" << std::right << std::setw(6) << "cases"
              << std::setw(8) << "shrunk" << std::setw(9) << "seconds" << "\n";
    for (const auto& o : outcomes) {
      std::cout << std::left << std::setw(29) << o.name << std::setw(8)
                << (o.killed ? "yes" : "NO") << std::setw(70)
                << (o.killed ? o.property : "-") << std::right << std::setw(6) << o.cases
                << std::setw(8) << o.shrunk_size << std::setw(9) << std::fixed
                << std::setprecision(2) << o.seconds << "\n";
    }
    std::cout << "mutation score: " << killed << " of " << outcomes.size() << " killed ("
              << std::setprecision(1) << 100.0 * score << "%)\n";
    for (const auto& o : outcomes) {
      if (!o.killed) {
        std::cout << "survivor: " << o.name << "; replay: shardcheck-mutants --only=" << o.name
                  << " --seed=" << seed << " --max-success=" << max_success << "\n";
      }
    }
  }
  return killed == outcomes.size() ? 0 : 1;
}
