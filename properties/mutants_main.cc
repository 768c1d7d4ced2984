// shardcheck-mutants: runs the property suite against every mutant (a known bug re-injected into
// the fully patched port) and prints which property kills it, after how many cases, how small
// the shrunk counterexample is, how long it took, and the mutation score.
//
//   shardcheck-mutants [--only=NAME] [--max-success=N] [--seed=N] [--json]
//
// Exit status: 0 when every mutant is killed, 1 when one survives, 2 on bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "properties/registry.h"
#include "properties/run.h"
#include "sim/input/args.h"

namespace {

struct Outcome {
  std::string name;
  bool killed = false;
  std::string property;
  int cases = 0;         // cases run until the failing one, that one included
  size_t shrunk_size = 0;  // values RapidCheck drew for the shrunk counterexample
  double seconds = 0;
};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// The options of one run.
struct Options {
  std::string only;
  uint64_t max_success = 200, seed = 1;
  bool json = false;
};

// --max-success=N, N above 0.
std::optional<std::string> apply_max_success(const sc::input::OptionArg& arg, Options& options) {
  const auto n = sc::input::parse_integer(arg.value, 1, INT32_MAX);
  if (!n) return arg.bad("expected a number above 0");
  options.max_success = static_cast<uint64_t>(*n);
  return std::nullopt;
}

// --seed=N.
std::optional<std::string> apply_seed(const sc::input::OptionArg& arg, Options& options) {
  const auto n = sc::input::parse_unsigned(arg.value);
  if (!n) return arg.bad("expected a number");
  options.seed = *n;
  return std::nullopt;
}

// The options of shardcheck-mutants, in the order of its usage text.
const sc::input::Option<Options> kOptions[] = {
    {"only", "NAME", "one mutant (default: every mutant)",
     sc::input::set_text<Options, &Options::only>},
    {"max-success", "N", "cases per property and mutant (200)", apply_max_success},
    {"seed", "N", "RapidCheck's seed (1)", apply_seed},
    {"json", nullptr, "one JSON object instead of the table",
     sc::input::set_flag<Options, &Options::json>},
};

const std::string kUsage =
    "usage: shardcheck-mutants [--only=NAME] [--max-success=N] [--seed=N] [--json]\n" +
    sc::input::option_help(sc::input::texts_of(kOptions), {19, '='}) +
    "Options taking a value also accept it as the next argument (--only MEG-01).\n"
    "Exit status: 0 every mutant killed, 1 one survived, 2 bad arguments.\n";

int bad_input(const std::string& why) {
  std::cerr << "shardcheck-mutants: " << why << "\n" << kUsage;
  return sc::input::kExitBadInput;
}

// The variant properties in the order they are tried against `mutant`: those that name it among
// their killers first (the kill is usually there), then the others in the registry's order.
// Whether the suite kills it does not depend on the order; the time does.
std::vector<const sc::props::Property*> kill_order(const std::string& mutant) {
  std::vector<const sc::props::Property*> first, rest;
  for (const sc::props::Property* p : sc::props::variant_properties()) {
    const bool named = std::find(p->killers.begin(), p->killers.end(), mutant) != p->killers.end();
    (named ? first : rest).push_back(p);
  }
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

// Runs the variant properties against `mutant` (kill_order) until one fails.
Outcome kill(const sc::sut::Behaviour& mutant, const Options& options) {
  Outcome o;
  o.name = mutant.name;
  const auto start = std::chrono::steady_clock::now();
  for (const sc::props::Property* p : kill_order(mutant.name)) {
    sc::props::RunOptions run;
    run.seed = options.seed;
    run.max_success = static_cast<int>(options.max_success);
    const sc::props::RunOutcome r = sc::props::run_property([&] { p->body(mutant); }, run);
    if (r.kind == sc::props::RunOutcome::Kind::kGaveUp) {
      std::cerr << "shardcheck-mutants: " << p->name << " gave up on " << mutant.name << ": "
                << r.description << "\n";
    }
    if (r.failed()) {
      o.killed = true;
      o.property = p->name;
      o.cases = r.cases;
      o.shrunk_size = r.shrunk_size;
      break;
    }
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return o;
}

void print_json(const std::vector<Outcome>& outcomes, double score, const Options& options) {
  std::cout << "{\"score\": " << score << ", \"seed\": " << options.seed
            << ", \"max_success\": " << options.max_success << ", \"mutants\": [";
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    std::cout << (i ? ", " : "") << "{\"name\": " << quoted(o.name)
              << ", \"killed\": " << (o.killed ? "true" : "false")
              << ", \"property\": " << (o.killed ? quoted(o.property) : "null")
              << ", \"cases\": " << o.cases << ", \"shrunk_size\": " << o.shrunk_size
              << ", \"seconds\": " << std::setprecision(3) << o.seconds << "}";
  }
  std::cout << "]}\n";
}

void print_table(const std::vector<Outcome>& outcomes, size_t killed, double score,
                 const Options& options) {
  std::cout << "SEED=" << options.seed << " max_success=" << options.max_success << "\n";
  int width = 10;  // the longest mutant name, and two spaces
  for (const auto& o : outcomes) width = std::max(width, static_cast<int>(o.name.size()) + 2);
  std::cout << std::left << std::setw(width) << "mutant" << std::setw(8) << "killed"
            << std::setw(70) << "property" << std::right << std::setw(6) << "cases"
            << std::setw(8) << "shrunk" << std::setw(9) << "seconds" << "\n";
  for (const auto& o : outcomes) {
    std::cout << std::left << std::setw(width) << o.name << std::setw(8)
              << (o.killed ? "yes" : "NO") << std::setw(70) << (o.killed ? o.property : "-")
              << std::right << std::setw(6) << o.cases << std::setw(8) << o.shrunk_size
              << std::setw(9) << std::fixed << std::setprecision(2) << o.seconds << "\n";
  }
  std::cout << "mutation score: " << killed << " of " << outcomes.size() << " killed ("
            << std::setprecision(1) << 100.0 * score << "%)\n";
  for (const auto& o : outcomes) {
    if (!o.killed) {
      std::cout << "survivor: " << o.name << "; replay: shardcheck-mutants --only=" << o.name
                << " --seed=" << options.seed << " --max-success=" << options.max_success
                << "\n";
    }
  }
}

// The options of `args`, or the exit status when there is nothing to run (--help, bad input).
std::variant<Options, int> parse(const std::vector<std::string>& args) {
  Options options;
  bool help = false;
  if (auto why = sc::input::apply_args(args, kOptions, options, help)) return bad_input(*why);
  if (help) {
    std::cout << kUsage;
    return sc::input::kExitOk;
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = parse(std::vector<std::string>(argv + 1, argv + argc));
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  const Options& options = std::get<Options>(parsed);
  std::vector<sc::sut::Behaviour> mutants;
  for (const auto& m : sc::sut::all_mutants()) {
    if (options.only.empty() || m.name == options.only) mutants.push_back(m);
  }
  if (mutants.empty()) return bad_input("--only=" + options.only + ": no mutant of that name");
  std::vector<Outcome> outcomes;
  for (const auto& m : mutants) outcomes.push_back(kill(m, options));
  size_t killed = 0;
  for (const auto& o : outcomes) killed += o.killed ? 1 : 0;
  const double score = static_cast<double>(killed) / static_cast<double>(outcomes.size());
  if (options.json) {
    print_json(outcomes, score, options);
  } else {
    print_table(outcomes, killed, score, options);
  }
  return killed == outcomes.size() ? sc::input::kExitOk : sc::input::kExitCheckFailed;
}
