// shardcheck-verify: every property of the table that runs against real code, run against a
// Megatron-LM tree as the system under test (scripts/verify-megatron prepares the tree and calls
// this).
//
//   shardcheck-verify --tree DIR [--json] [--only NAME] [--name TREE] [--commit C]
//                     [--patch NAME]... [--replay COMMAND]
//
// RC_PARAMS sets the cases and the seed as elsewhere. Exit status: 0 every property passes, 1
// one fails, 2 bad input (arguments, or a tree the worker cannot serve: one line says why).
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/registry.h"
#include "properties/run.h"
#include "properties/support.h"
#include "sim/input/args.h"
#include "sim/rig/megatron_worker.h"

namespace {

using nlohmann::json;

struct Request {
  std::string tree, name, commit, replay, only;
  std::vector<std::string> patches;
  bool json = false;
};

// --patch=NAME, repeatable.
std::optional<std::string> apply_patch(const sc::sim::OptionArg& arg, Request& request) {
  request.patches.push_back(arg.value);
  return std::nullopt;
}

// The options of shardcheck-verify, in the order of its usage text.
const sc::sim::Option<Request> kOptions[] = {
    {"tree", "DIR", "a Megatron-LM tree (it holds megatron/core), run as the system under test",
     sc::sim::set_text<Request, &Request::tree>},
    {"json", nullptr, "one JSON object instead of the text report",
     sc::sim::set_flag<Request, &Request::json>},
    {"only", "NAME", "this property alone (Suite.Name)", sc::sim::set_text<Request, &Request::only>},
    {"name", "TREE", "the tree's name in the report (DIR)", sc::sim::set_text<Request, &Request::name>},
    {"commit", "C", "the tree's commit, for the report", sc::sim::set_text<Request, &Request::commit>},
    {"patch", "NAME", "a patch applied to the tree, for the report (repeatable)", apply_patch},
    {"replay", "CMD", "the command that replays a failure (RC_PARAMS=\"reproduce=...\" CMD)",
     sc::sim::set_text<Request, &Request::replay>},
};

const std::string kUsage =
    "usage: shardcheck-verify --tree DIR [--json] [--only NAME] [--name TREE] [--commit C]\n"
    "                         [--patch NAME]... [--replay COMMAND]\n" +
    sc::sim::option_help(sc::sim::texts_of(kOptions), {17, ' '}) +
    "RC_PARAMS sets the cases and the seed. Exit status: 0 every property passes, 1 one fails,\n"
    "2 bad input or a tree the worker cannot serve.\n";

int usage(const std::string& why) {
  std::cerr << "shardcheck-verify: " << why << "\n" << kUsage;
  return sc::sim::kExitBadInput;
}

std::variant<Request, int> parse(const std::vector<std::string>& args) {
  Request r;
  bool help = false;
  if (auto why = sc::sim::apply_args(args, kOptions, r, help)) return usage(*why);
  if (help) {
    std::cout << kUsage;
    return sc::sim::kExitOk;
  }
  if (r.tree.empty()) return usage("no --tree given");
  if (r.replay.empty()) r.replay = "shardcheck-verify --tree " + r.tree;
  if (r.name.empty()) r.name = r.tree;
  return r;
}

// One property's outcome against the tree.
struct Outcome {
  const sc::props::Property* property;
  sc::props::RunOutcome run;
  std::string replay;
};

Outcome verify(const sc::props::Property& p, const Request& r) {
  const std::string id = p.name.substr(0, p.name.find('.')) + "/" +
                         p.name.substr(p.name.find('.') + 1);
  sc::props::RunOptions options;
  options.id = id;
  const sc::sut::Behaviour variant = sc::props::variant_under_test();
  Outcome out{&p, sc::props::run_property([&] { p.body(variant); }, options), ""};
  if (out.run.failed()) {
    out.replay = "RC_PARAMS=\"reproduce=" + out.run.reproduce + "\" " + r.replay + " --only " +
                 p.name;
  }
  return out;
}

// A property that a reproduce string (RC_PARAMS="reproduce=...") does not name runs no case:
// it was not run, which is not a pass.
bool left_out_by_reproduce(const Outcome& o) {
  const char* params = std::getenv("RC_PARAMS");
  return o.run.kind == sc::props::RunOutcome::Kind::kPassed && o.run.cases == 0 &&
         params != nullptr && std::string(params).find("reproduce=") != std::string::npos;
}
constexpr const char* kNotInReproduce = "not in the reproduce string";

// What ran on a stand-in rather than on Megatron's own code, in the worker's words.
std::vector<std::string> stand_ins() {
  const json& hello = sc::sim::MegatronWorker::of(*sc::props::megatron_tree()).hello();
  return hello.value("stand_ins", std::vector<std::string>());
}

void print_text(const Request& r, const std::vector<Outcome>& outcomes,
                const std::vector<const sc::props::Property*>& not_run) {
  std::cout << "tree " << r.name << (r.commit.empty() ? "" : " at " + r.commit)
            << (r.patches.empty() ? "" : " with " + sc::sim::join(r.patches, ", ")) << "\n";
  std::cout << "stand-ins (not Megatron's code):\n";
  for (const std::string& s : stand_ins()) std::cout << "  - " << s << "\n";
  int passed = 0, failed = 0, left_out = 0;
  for (const Outcome& o : outcomes) {
    if (left_out_by_reproduce(o)) {
      std::cout << "NOT RUN  " << o.property->name << ": " << kNotInReproduce << "\n";
      ++left_out;
      continue;
    }
    const bool gave_up = o.run.kind == sc::props::RunOutcome::Kind::kGaveUp;
    const char* verdict = o.run.failed() ? "FAIL" : gave_up ? "GAVE UP" : "PASS";
    std::cout << verdict << "  " << o.property->name << "  (" << o.run.cases << " cases)\n";
    (o.run.kind == sc::props::RunOutcome::Kind::kPassed ? passed : failed) += 1;
    if (!o.run.failed()) continue;
    std::cout << "  counterexample:\n" << o.run.counterexample << "  failure: "
              << o.run.description << "\n  replay: " << o.replay << "\n";
  }
  for (const auto* p : not_run) {
    std::cout << "NOT RUN  " << p->name << ": " << p->not_on_real_code << "\n";
  }
  std::cout << "summary: " << passed << " passed, " << failed << " failed or gave up, "
            << not_run.size() + left_out << " not run\n";
}

json report_json(const Request& r, const std::vector<Outcome>& outcomes,
                 const std::vector<const sc::props::Property*>& not_run) {
  json properties = json::array(), skipped = json::array();
  int passed = 0, failed = 0;
  for (const Outcome& o : outcomes) {
    if (left_out_by_reproduce(o)) {
      skipped.push_back({{"name", o.property->name}, {"why", kNotInReproduce}});
      continue;
    }
    const bool ok = o.run.kind == sc::props::RunOutcome::Kind::kPassed;
    (ok ? passed : failed) += 1;
    properties.push_back({{"name", o.property->name},
                          {"passed", ok},
                          {"cases", o.run.cases},
                          {"counterexample", ok ? json(nullptr) : json(o.run.counterexample)},
                          {"failure", ok ? json(nullptr) : json(o.run.description)},
                          {"replay", ok ? json(nullptr) : json(o.replay)}});
  }
  for (const auto* p : not_run) {
    skipped.push_back({{"name", p->name}, {"why", p->not_on_real_code}});
  }
  return {{"tree", r.name},         {"commit", r.commit.empty() ? json(nullptr) : json(r.commit)},
          {"patches", r.patches},   {"properties", properties},
          {"passed", passed},       {"failed", failed},
          {"not_run", skipped},     {"stand_ins", stand_ins()}};
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
  try {
    sc::sim::MegatronWorker::of(*sc::props::megatron_tree()).hello();
  } catch (const sc::sim::MegatronUnavailable& e) {
    std::cerr << "shardcheck-verify: --tree " << r.tree << ": " << e.what() << "\n";
    return sc::sim::kExitBadInput;
  }
  std::vector<Outcome> outcomes;
  std::vector<const sc::props::Property*> not_run;
  for (const sc::props::Property& p : sc::props::all_properties()) {
    if (!r.only.empty() && p.name != r.only) continue;
    if (!sc::props::runs_on_real_code(p)) {
      not_run.push_back(&p);
      continue;
    }
    if (!r.json) std::cerr << "running " << p.name << "\n";
    outcomes.push_back(verify(p, r));
  }
  if (r.json) {
    std::cout << report_json(r, outcomes, not_run).dump(2) << "\n";
  } else {
    print_text(r, outcomes, not_run);
  }
  for (const Outcome& o : outcomes) {
    if (o.run.kind != sc::props::RunOutcome::Kind::kPassed) return sc::sim::kExitCheckFailed;
  }
  return sc::sim::kExitOk;
}
