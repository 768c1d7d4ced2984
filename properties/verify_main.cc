// shardcheck-verify: every property of the table that runs against real code, run against a
// Megatron-LM tree as the system under test (scripts/verify-megatron prepares the trees and calls
// this). With --after-tree it reviews a patch: the same table with the same seed on the tree
// before the patch (--tree) and after it, one verdict per property.
//
//   shardcheck-verify --tree DIR [--json] [--only NAME] [--name TREE] [--commit C]
//                     [--patch FILE]... [--replay CMD] [--case-replay CMD] [--run-dir DIR]
//                     [--after-tree DIR --fix FILE [--after-replay CMD] [--left-out TEXT]...
//                      [--fixes FN]... [--regressions DIR]]
//                     [--real-ranks VARIANT [--real-ranks-cases N]] [--junit FILE]
//                     [--control-tree DIR]
//
// --control-tree DIR runs each case of a replayable property on DIR first and discards it where
// DIR fails it too: a failure is then one the tree's extra patch causes, and its shrunk case one
// the control passes (scripts/recall's attribution where the control fails the property on other
// cases, a finding its base leaves out).
//
// --real-ranks adds the properties that run the real code themselves, on real ranks (one worker
// process per DP rank over Gloo) and beside the port, the port under VARIANT: the fixes the tree
// carries (`patched` for a tree with the seed fix and every finding's patch, `patched-F3` for one
// without F3's). They are NOT RUN without it: the port would be compared with a tree it does not
// describe.
//
// RC_PARAMS sets the cases and the seed as elsewhere. Exit status: 0 every property passes (a
// review: nothing newly failing and every claim holds), 1 otherwise, 2 bad input (arguments, or a
// tree the worker cannot serve: one line says why).
#include <rapidcheck.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "properties/case_file.h"
#include "properties/junit.h"
#include "properties/registry.h"
#include "properties/run.h"
#include "properties/support.h"
#include "properties/verify_report.h"
#include "sim/input/args.h"
#include "sim/rig/megatron_worker.h"

namespace {

namespace fs = std::filesystem;
using sc::props::Outcome;
using sc::props::TreeRun;

struct Request {
  std::string tree, name, commit, replay, case_replay, only, run_dir;
  std::vector<std::string> patches;
  bool json = false;
  // A review: the tree with the fix, the fix, what its base left out, and what it claims.
  std::string after_tree, fix, after_replay, regressions;
  std::vector<std::string> left_out, fixes, claim_failed;
  // The real-ranks properties and the port's variant beside them; their cases (0: RC_PARAMS's).
  std::string real_ranks;
  int real_ranks_cases = 0;
  std::string junit;  // JUnit XML of the run, written here as well
  // The same tree without one patch: a case it fails is discarded, so that what fails is the
  // patch's doing (the replayable properties only).
  std::string control_tree;
};

std::optional<std::string> set_real_ranks_cases(const sc::input::OptionArg& arg, Request& r) {
  const auto n = sc::input::parse_integer(arg.value, 1, 100000);
  if (!n) return arg.bad("not a count of cases (1 to 100000)");
  r.real_ranks_cases = static_cast<int>(*n);
  return std::nullopt;
}

template <std::vector<std::string> Request::*list>
std::optional<std::string> add_to(const sc::input::OptionArg& arg, Request& request) {
  (request.*list).push_back(arg.value);
  return std::nullopt;
}

// The options of shardcheck-verify, in the order of its usage text.
const sc::input::Option<Request> kOptions[] = {
    {"tree", "DIR", "a Megatron-LM tree (it holds megatron/core), run as the system under test",
     sc::input::set_text<Request, &Request::tree>},
    {"json", nullptr, "one JSON object instead of the text report",
     sc::input::set_flag<Request, &Request::json>},
    {"only", "NAME", "this property alone (Suite.Name)",
     sc::input::set_text<Request, &Request::only>},
    {"name", "TREE", "the tree as its user named it, for the report and the case files (DIR)",
     sc::input::set_text<Request, &Request::name>},
    {"commit", "C", "the tree's commit, for the report",
     sc::input::set_text<Request, &Request::commit>},
    {"patch", "FILE", "a patch applied to the tree, for the report (repeatable)",
     add_to<&Request::patches>},
    {"replay", "CMD", "the command that replays a failure (RC_PARAMS=\"reproduce=...\" CMD)",
     sc::input::set_text<Request, &Request::replay>},
    {"case-replay", "CMD", "the command that replays a failure's case file (CMD FILE)",
     sc::input::set_text<Request, &Request::case_replay>},
    {"run-dir", "DIR", "where failures' case files are kept (a fresh folder)",
     sc::input::set_text<Request, &Request::run_dir>},
    {"after-tree", "DIR", "review: the tree with the fix applied as well",
     sc::input::set_text<Request, &Request::after_tree>},
    {"fix", "FILE", "review: the patch under review", sc::input::set_text<Request, &Request::fix>},
    {"after-replay", "CMD", "review: --replay for the tree with the fix",
     sc::input::set_text<Request, &Request::after_replay>},
    {"left-out", "TEXT", "review: a patch left out of the base, and why (repeatable)",
     add_to<&Request::left_out>},
    {"fixes", "FN", "review: a finding the patch claims to fix (repeatable)",
     add_to<&Request::fixes>},
    {"regressions", "DIR", "review: the findings' regression cases (fN_*.json)",
     sc::input::set_text<Request, &Request::regressions>},
    {"claim-failed", "TEXT", "review: a claim found not to hold elsewhere (repeatable)",
     add_to<&Request::claim_failed>},
    {"real-ranks", "VARIANT",
     "also run the real-ranks properties, the port beside them under VARIANT (the tree's fixes)",
     sc::input::set_text<Request, &Request::real_ranks>},
    {"real-ranks-cases", "N", "cases of each real-ranks property (default: RC_PARAMS's)",
     set_real_ranks_cases},
    {"junit", "FILE", "also write the run (or the review) as JUnit XML to FILE",
     sc::input::set_text<Request, &Request::junit>},
    {"control-tree", "DIR",
     "the tree without the patch under test: cases it fails are discarded (replayable ones)",
     sc::input::set_text<Request, &Request::control_tree>},
};

const std::string kUsage =
    "usage: shardcheck-verify --tree DIR [options]\n" +
    sc::input::option_help(sc::input::texts_of(kOptions), {19, ' '}) +
    "RC_PARAMS sets the cases and the seed. Exit status: 0 every property passes (a review:\n"
    "nothing newly failing and every claim holds), 1 otherwise, 2 bad input or a tree the\n"
    "worker cannot serve.\n";

int usage(const std::string& why) {
  std::cerr << "shardcheck-verify: " << why << "\n" << kUsage;
  return sc::input::kExitBadInput;
}

std::optional<std::string> review_problem(const Request& r) {
  const bool review = !r.after_tree.empty();
  if (review && r.fix.empty()) return "--after-tree needs --fix";
  if (!review && (!r.fix.empty() || !r.fixes.empty() || !r.left_out.empty())) {
    return "--fix, --fixes and --left-out review a patch: give --after-tree";
  }
  for (const std::string& f : r.fixes) {
    if (f.size() < 2 || f[0] != 'F' || f.find_first_not_of("0123456789", 1) != std::string::npos) {
      return "--fixes=" + f + ": not a finding id (F1, F2, ...)";
    }
  }
  if (!r.fixes.empty() && r.regressions.empty()) return "--fixes needs --regressions";
  if (!r.real_ranks.empty() && !sc::sut::behaviour_by_name(r.real_ranks)) {
    return "--real-ranks=" + r.real_ranks + ": not a variant (upstream, pr6982, patched-F3, ...)";
  }
  if (r.real_ranks.empty() && r.real_ranks_cases != 0)
    return "--real-ranks-cases needs --real-ranks";
  return std::nullopt;
}

std::variant<Request, int> parse(const std::vector<std::string>& args) {
  Request r;
  bool help = false;
  if (auto why = sc::input::apply_args(args, kOptions, r, help)) return usage(*why);
  if (help) {
    std::cout << kUsage;
    return sc::input::kExitOk;
  }
  if (r.tree.empty()) return usage("no --tree given");
  if (auto why = review_problem(r)) return usage(*why);
  if (r.replay.empty()) r.replay = "shardcheck-verify --tree " + r.tree;
  if (r.after_replay.empty()) r.after_replay = "shardcheck-verify --tree " + r.after_tree;
  if (r.name.empty()) r.name = r.tree;
  return r;
}

// One tree to run the table on.
struct Side {
  std::string dir;     // the tree the worker loads
  TreeRun run;         // its name, commit and patches, and the outcomes
  std::string replay;  // RC_PARAMS="reproduce=..." replay
  std::string case_dir;
};

// The tree as failure messages name it: "d8b71082 with pr6982, F3".
std::string label(const TreeRun& run) { return sc::props::real_code_label(run.name, run.patches); }

// Points the case files' provenance (registry.cc's real_code_source) at `side`.
void describe(const Side& side) {
  setenv("SC_MEGATRON_NAME", side.run.name.c_str(), 1);
  setenv("SC_MEGATRON_COMMIT", side.run.commit.c_str(), 1);
  setenv("SC_MEGATRON_PATCHES", sc::input::join(side.run.patches, "\n").c_str(), 1);
  setenv("SC_CASE_DIR", side.case_dir.c_str(), 1);
}

// A property that a reproduce string (RC_PARAMS="reproduce=...") does not name runs no case:
// it was not run, which is not a pass.
bool left_out_by_reproduce(const sc::props::RunOutcome& run) {
  const char* params = std::getenv("RC_PARAMS");
  return run.kind == sc::props::RunOutcome::Kind::kPassed && run.cases == 0 && params != nullptr &&
         std::string(params).find("reproduce=") != std::string::npos;
}

// Whether `check` fails on the control tree; a case the control discards is discarded.
bool fails_on_control(const std::function<void()>& check, const Request& r) {
  sc::props::RealCodeScope control({r.control_tree, false}, r.control_tree);
  try {
    check();
  } catch (const rc::detail::CaseResult& result) {
    if (result.type != rc::detail::CaseResult::Type::Failure) throw;
    return true;
  } catch (const std::exception&) {
    return true;
  }
  return false;
}

// `p`'s body, or with --control-tree, where the property can: each drawn case discarded where
// the control fails it, then its check.
std::function<void(const sc::sut::Behaviour&)> body_of(const sc::props::Property& p,
                                                       const Request& r) {
  if (r.control_tree.empty()) return p.body;
  if (p.body_beside_control) {
    return [&p, &r](const sc::sut::Behaviour& variant) {
      p.body_beside_control(variant, [&r](const std::function<void()>& check) {
        return fails_on_control(check, r);
      });
    };
  }
  if (!p.check || !p.draw) return p.body;
  return [&p, &r](const sc::sut::Behaviour& variant) {
    const sc::props::CaseInputs in = p.draw();
    RC_PRE(!fails_on_control([&] { p.check(in, variant); }, r));
    p.check(in, variant);
  };
}

Outcome verify(const sc::props::Property& p, const Side& side, const Request& r) {
  const std::string id =
      p.name.substr(0, p.name.find('.')) + "/" + p.name.substr(p.name.find('.') + 1);
  sc::props::RunOptions options;
  options.id = id;
  options.rapidcheck_listener = false;  // each failure prints its one replay line
  const bool beside_port = p.target == sc::props::Target::kPortVsRealCode;
  const sc::sut::Behaviour variant =
      beside_port ? *sc::sut::behaviour_by_name(r.real_ranks) : sc::props::variant_under_test();
  if (beside_port && r.real_ranks_cases > 0) options.max_success = r.real_ranks_cases;
  Outcome out;
  out.property = &p;
  if (!r.control_tree.empty() && !p.body_beside_control && !(p.check && p.draw)) {
    out.not_run = true;
    out.why_not_run = "its cases are drawn in its body: none can be run on the control first";
    return out;
  }
  const auto start = std::chrono::steady_clock::now();
  out.run = sc::props::run_property([&] { body_of(p, r)(variant); }, options);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.not_run = left_out_by_reproduce(out.run);
  if (!out.failed()) return out;
  const fs::path file = fs::path(side.case_dir) / (p.name + ".megatron.json");
  if (p.check && fs::exists(file)) out.case_file = file.string();
  out.replay = !out.case_file.empty() && !r.case_replay.empty()
                   ? r.case_replay + " " + out.case_file
                   : "RC_PARAMS=\"reproduce=" + out.run.reproduce + "\" " + side.replay +
                         " --only " + p.name;
  return out;
}

// Whether `p` runs in this request: it runs against real code, or it runs the real code on real
// ranks beside the port and --real-ranks asked for those.
bool in_table(const sc::props::Property& p, const Request& r) {
  return sc::props::runs_on_real_code(p) ||
         (!r.real_ranks.empty() && p.target == sc::props::Target::kPortVsRealCode);
}

// Runs the table on `side` (every property, or --only's).
void run_table(Side& side, const Request& r) {
  describe(side);
  fs::create_directories(side.case_dir);
  sc::props::RealCodeScope scope({side.dir, false}, label(side.run));
  for (const sc::props::Property& p : sc::props::all_properties()) {
    if ((!r.only.empty() && p.name != r.only) || !in_table(p, r)) continue;
    if (!r.json) std::cerr << "running " << p.name << " on " << label(side.run) << "\n";
    side.run.outcomes.push_back(verify(p, side, r));
  }
}

std::vector<const sc::props::Property*> not_on_real_code(const Request& r) {
  std::vector<const sc::props::Property*> out;
  for (const sc::props::Property& p : sc::props::all_properties()) {
    if ((r.only.empty() || p.name == r.only) && !in_table(p, r)) out.push_back(&p);
  }
  return out;
}

// The findings' regression cases: {finding id, case file} for every DIR/fN_*.json.
std::vector<std::pair<std::string, sc::props::CaseFile>> regression_cases(const std::string& dir) {
  std::vector<std::pair<std::string, sc::props::CaseFile>> out;
  if (dir.empty()) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const size_t digits = name.find_first_not_of("0123456789", 1);
    if (name[0] != 'f' || digits == 1 || digits == std::string::npos || name[digits] != '_' ||
        e.path().extension() != ".json") {
      continue;
    }
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    out.emplace_back("F" + name.substr(1, digits - 1), sc::props::parse_case_file(text.str()));
  }
  return out;
}

// Whether `file`'s case fails on the tree now under test; nullopt when it cannot run there.
std::optional<bool> case_fails(const sc::props::CaseFile& file) {
  const sc::props::Property* p = sc::props::find_property(file.property);
  const auto b = sc::sut::behaviour_by_name(file.variant);
  if (p == nullptr || !p->check || !b) return std::nullopt;
  sc::props::RunOptions once;
  once.max_success = 1;
  once.shrink = false;
  once.rapidcheck_listener = false;
  bool not_run = false;
  const auto r = sc::props::run_property(
      [&] {
        try {
          p->check(file.inputs, *b);
        } catch (const sc::rig::NotRunAgainstRealCode&) {
          not_run = true;
        }
      },
      once);
  if (not_run || r.kind == sc::props::RunOutcome::Kind::kGaveUp) return std::nullopt;
  return r.failed();
}

// Names the findings each still-failing property reproduces and checks the claims, on the tree
// with the fix.
void judge_after(sc::props::Review& review, const Side& after, const Request& r) {
  const auto cases = regression_cases(r.regressions);
  sc::props::RealCodeScope scope({after.dir, false}, label(after.run));
  for (auto& p : review.properties) {
    if (p.verdict != sc::props::Verdict::kStillFailing) continue;
    for (const auto& [finding, file] : cases) {
      if (file.property == p.after.property->name && case_fails(file).value_or(false)) {
        p.findings.push_back(finding);
      }
    }
  }
  for (const std::string& claim : r.fixes) {
    std::vector<std::pair<std::string, bool>> runnable;
    for (const auto& [finding, file] : cases) {
      if (finding != claim) continue;
      if (const auto fails = case_fails(file)) runnable.emplace_back(file.property, *fails);
    }
    sc::props::judge_claim(review, claim, runnable);
  }
}

sc::props::Review review_of(const Side& before, const Side& after, const Request& r) {
  sc::props::Review review;
  review.before = before.run;
  review.after = after.run;
  review.before.outcomes.clear();
  review.after.outcomes.clear();
  review.fix = r.fix;
  review.left_out = r.left_out;
  review.claim_failures = r.claim_failed;
  for (size_t k = 0; k < before.run.outcomes.size(); ++k) {
    sc::props::ReviewedProperty p;
    p.before = before.run.outcomes[k];
    p.after = after.run.outcomes[k];
    p.verdict = sc::props::verdict_of(p.before, p.after);
    review.properties.push_back(p);
  }
  judge_after(review, after, r);
  return review;
}

// What ran on a stand-in rather than on Megatron's own code, in the worker's words.
std::vector<std::string> stand_ins(const std::string& tree) {
  const nlohmann::json& hello = sc::rig::MegatronWorker::of({tree, false}).hello();
  return hello.value("stand_ins", std::vector<std::string>());
}

// The worker can serve `tree`, or the exit status after saying why not.
std::optional<int> unservable(const std::string& tree) {
  try {
    sc::rig::MegatronWorker::of({tree, false}).hello();
  } catch (const sc::rig::MegatronUnavailable& e) {
    std::cerr << "shardcheck-verify: --tree " << tree << ": " << e.what() << "\n";
    return sc::input::kExitBadInput;
  }
  return std::nullopt;
}

std::string fresh_run_dir(const Request& r) {
  if (!r.run_dir.empty()) return r.run_dir;
  std::string pattern = (fs::temp_directory_path() / "shardcheck-verify.XXXXXX").string();
  const char* made = mkdtemp(pattern.data());
  return made == nullptr ? "shardcheck-verify-run" : made;
}

// Writes --junit's file, where one was asked for; false (and why, on stderr) when it cannot.
bool write_junit(const Request& r, const std::string& xml) {
  if (r.junit.empty()) return true;
  std::ofstream out(r.junit);
  out << xml;
  if (out.flush()) return true;
  std::cerr << "shardcheck-verify: --junit=" << r.junit << ": cannot write it\n";
  return false;
}

// The tree `r` names, with `patches`, before any outcome.
TreeRun tree_run(const Request& r, std::vector<std::string> patches) {
  TreeRun run;
  run.name = r.name;
  run.commit = r.commit;
  run.patches = std::move(patches);
  return run;
}

int run_once(const Request& r, const std::string& run_dir) {
  Side side{r.tree, tree_run(r, r.patches), r.replay, run_dir};
  run_table(side, r);
  side.run.real_ranks = r.real_ranks;
  side.run.real_ranks_cases = r.real_ranks_cases;
  const auto skipped = not_on_real_code(r);
  if (!write_junit(r, sc::props::junit_xml(side.run, skipped))) return sc::input::kExitBadInput;
  if (r.json) {
    nlohmann::json out = sc::props::run_json(side.run, stand_ins(r.tree), skipped);
    out["run_dir"] = run_dir;
    std::cout << out.dump(2) << "\n";
  } else {
    sc::props::print_run(std::cout, side.run, stand_ins(r.tree), skipped);
  }
  for (const Outcome& o : side.run.outcomes) {
    if (!o.failed()) continue;
    if (!r.json) std::cout << "cases of the failures: " << run_dir << "\n";
    return sc::input::kExitCheckFailed;
  }
  return sc::input::kExitOk;
}

int run_review(const Request& r, const std::string& run_dir) {
  std::vector<std::string> with_fix = r.patches;
  with_fix.push_back(r.fix);
  Side before{r.tree, tree_run(r, r.patches), r.replay, run_dir + "/before"};
  Side after{r.after_tree, tree_run(r, with_fix), r.after_replay, run_dir + "/after"};
  run_table(before, r);
  run_table(after, r);
  const sc::props::Review review = review_of(before, after, r);
  const auto skipped = not_on_real_code(r);
  if (!write_junit(r, sc::props::junit_xml(review, skipped))) return sc::input::kExitBadInput;
  if (r.json) {
    nlohmann::json out = sc::props::review_json(review, skipped);
    out["run_dir"] = run_dir;
    std::cout << out.dump(2) << "\n";
  } else {
    sc::props::print_review(std::cout, review, skipped);
    std::cout << "cases of the failures: " << run_dir << "\n";
  }
  return review.failed() ? sc::input::kExitCheckFailed : sc::input::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = parse(std::vector<std::string>(argv + 1, argv + argc));
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  const Request& r = std::get<Request>(parsed);
  if (!r.only.empty() && sc::props::find_property(r.only) == nullptr) {
    return usage("--only: no property named '" + r.only + "'");
  }
  setenv("SC_SUT", "megatron", 1);
  setenv("SC_MEGATRON_TREE", r.tree.c_str(), 1);
  if (std::getenv("SC_VARIANT") == nullptr) setenv("SC_VARIANT", "upstream", 1);
  sc::props::configure_generation();
  if (auto status = unservable(r.tree)) return *status;
  if (!r.after_tree.empty()) {
    if (auto status = unservable(r.after_tree)) return *status;
  }
  try {
    regression_cases(r.regressions);
  } catch (const std::exception& e) {
    return usage("--regressions=" + r.regressions + ": " + e.what());
  }
  const std::string run_dir = fresh_run_dir(r);
  return r.after_tree.empty() ? run_once(r, run_dir) : run_review(r, run_dir);
}
