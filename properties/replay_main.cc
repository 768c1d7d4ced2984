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

#include <rapidcheck.h>

#include "properties/case_file.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/step_gen.h"
#include "properties/property_table.h"

namespace {

int usage(const std::string& why) {
  std::cerr << "shardcheck-replay: " << why
            << "\nusage: shardcheck-replay CASE.json [--variant=NAME] [--property=Suite.Name]\n";
  return 2;
}

// The value of `--name=VALUE` or `--name VALUE` at argv[i]; advances i past a separate value.
bool option(const std::string& name, int argc, char** argv, int& i, std::string& value) {
  const std::string a = argv[i];
  if (a.rfind(name + "=", 0) == 0) {
    value = a.substr(name.size() + 1);
    return true;
  }
  if (a == name && i + 1 < argc) {
    value = argv[++i];
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, variant, property;
  bool have_variant = false, have_property = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (option("--variant", argc, argv, i, variant)) {
      have_variant = true;
    } else if (option("--property", argc, argv, i, property)) {
      have_property = true;
    } else if (a.rfind("-", 0) != 0 && path.empty()) {
      path = a;
    } else {
      return usage("bad argument '" + a + "'");
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
  const sc::props::PropertyDef* def = sc::props::find_diff_property(property);
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
  rc::detail::TestParams params;
  params.maxSuccess = 1;
  params.disableShrinking = true;
  const rc::detail::TestResult r = rc::detail::checkTestable(
      [&] { def->check(file.inputs, *behaviour); }, rc::detail::TestMetadata{}, params);
  rc::detail::FailureResult failure;
  rc::detail::GaveUpResult gave_up;
  if (r.match(failure)) {
    std::cout << "FAIL: " << failure.description << "\n";
    return 1;
  }
  if (r.match(gave_up)) {
    std::cout << "the property discards this case (a precondition does not hold): "
              << gave_up.description << "\n";
    return 2;
  }
  std::cout << "PASS\n";
  return 0;
}
