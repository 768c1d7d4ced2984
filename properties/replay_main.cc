// shardcheck-replay: runs one model-versus-port property on exactly the case of a case file
// (properties/case_file.h), as written by a failing property or by hand.
//
//   shardcheck-replay CASE.json [--variant=NAME] [--property=Suite.Name]
//
// The variant and the property default to the file's. Exit status: 0 when the property holds
// on the case, 1 when it fails (the violation is printed), 2 on bad arguments or a malformed
// case file (the message names the field).
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "properties/case_file.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/step_gen.h"
#include "properties/registry.h"
#include "properties/run.h"
#include "sim/input/args.h"

namespace {

constexpr const char* kUsage =
    "usage: shardcheck-replay CASE.json [--variant=NAME] [--property=Suite.Name]\n"
    "  --variant=NAME        a variant (upstream, pr6982+F1, patched, ...) or mutant (the file's)\n"
    "  --property=NAME       the property to run on the case (the file's)\n"
    "Options taking a value also accept it as the next argument (--variant upstream).\n"
    "Exit status: 0 the property holds, 1 it fails, 2 bad arguments or a malformed case file.\n";

int usage(const std::string& why) {
  std::cerr << "shardcheck-replay: " << why << "\n" << kUsage;
  return sc::sim::kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, variant, property;
  bool have_variant = false, have_property = false;
  auto split = sc::sim::split_args(std::vector<std::string>(argv + 1, argv + argc),
                                   {"variant", "property"}, {});
  if (auto* why = std::get_if<std::string>(&split)) return usage(*why);
  for (const sc::sim::Arg& a : std::get<std::vector<sc::sim::Arg>>(split)) {
    if (a.name == "help") {
      std::cout << kUsage;
      return sc::sim::kExitOk;
    } else if (a.name == "variant") {
      variant = a.value;
      have_variant = true;
    } else if (a.name == "property") {
      property = a.value;
      have_property = true;
    } else if (path.empty()) {
      path = a.value;
    } else {
      return usage("a second case file '" + a.value + "'");
    }
  }
  if (path.empty()) return usage("no case file given");
  std::ifstream in(path);
  if (!in) return usage("cannot read case file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  sc::props::CaseFile file;
  try {
    file = sc::props::parse_case_file(text.str());
  } catch (const sc::props::CaseFileError& e) {
    std::cerr << "shardcheck-replay: " << path << ": " << e.what() << "\n";
    return 2;
  }
  if (!have_variant) variant = file.variant.empty() ? sc::sut::fully_patched().name : file.variant;
  if (!have_property) property = file.property;
  if (property.empty()) return usage(path + ": the file names no property: give --property");
  const auto behaviour = sc::sut::behaviour_by_name(variant);
  if (!behaviour) return usage("--variant: no variant or mutant named '" + variant + "'");
  const sc::props::Property* def = sc::props::find_property(property);
  if (def == nullptr) return usage("--property: no property named '" + property + "'");
  if (!def->check) {
    return usage("--property: " + property + " draws inputs a case file does not hold");
  }

  std::cout << "replay: " << property << " variant=" << variant << " case=";
  sc::model::showValue(file.inputs.c, std::cout);
  std::cout << " ";
  sc::gen::showValue(file.inputs.schedule, std::cout);
  std::cout << " split=" << file.inputs.split << " other_fraction=" << file.inputs.other_fraction;
  if (!file.inputs.map_location.empty()) std::cout << " map_location=" << file.inputs.map_location;
  if (!file.inputs.commands.empty()) {
    std::cout << " rank=" << file.inputs.rank << " commands=" << file.inputs.commands.size();
  }
  std::cout << "\n";
  // One RapidCheck case that draws nothing: RC_ASSERT, RC_LOG and RC_PRE work as in the suite.
  sc::props::RunOptions once;
  once.max_success = 1;
  once.shrink = false;
  const sc::props::RunOutcome r =
      sc::props::run_property([&] { def->check(file.inputs, *behaviour); }, once);
  if (r.failed()) {
    std::cout << "FAIL: " << r.description << "\n";
    return sc::sim::kExitCheckFailed;
  }
  if (r.kind == sc::props::RunOutcome::Kind::kGaveUp) {
    std::cout << "the property discards this case (a precondition does not hold): "
              << r.description << "\n";
    return sc::sim::kExitBadInput;
  }
  std::cout << "PASS\n";
  return 0;
}
