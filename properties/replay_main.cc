// shardcheck-replay: runs one model-versus-port property on exactly the case of a case file
// (properties/case_file.h), as written by a failing property or by hand.
//
//   shardcheck-replay CASE.json [--variant=NAME] [--property=Suite.Name]
//
// The variant and the property default to the file's. Exit status: 0 when the property holds
// on the case, 1 when it fails (the violation is printed), 2 on bad arguments, a malformed
// case file (the message names the field), or a case the system under test cannot run.
#include <fstream>
#include <iostream>
#include <sstream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "properties/case_file.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/step_gen.h"
#include "properties/support.h"
#include "properties/registry.h"
#include "properties/run.h"
#include "sim/input/args.h"
#include "sim/rig/rank_under_test.h"

namespace {

// The case file's path and the --variant and --property given (empty when not).
struct Request {
  std::string path;
  std::optional<std::string> variant, property;
};

// The case file, the one positional argument.
std::optional<std::string> apply_path(const sc::input::OptionArg& arg, Request& request) {
  if (!request.path.empty()) return "a second case file '" + arg.value + "'";
  request.path = arg.value;
  return std::nullopt;
}

// --variant=NAME, --property=NAME: checked once the case file is read (they default to its).
std::optional<std::string> apply_name(const sc::input::OptionArg& arg, Request& request) {
  (arg.name == "variant" ? request.variant : request.property) = arg.value;
  return std::nullopt;
}

// The options of shardcheck-replay, in the order of its usage text.
const sc::input::Option<Request> kOptions[] = {
    {"", nullptr, nullptr, apply_path},
    {"variant", "NAME", "a variant (upstream, pr6982+F1, patched, ...) or mutant (the file's)",
     apply_name},
    {"property", "NAME", "the property to run on the case (the file's)", apply_name},
};

const std::string kUsage =
    "usage: shardcheck-replay CASE.json [--variant=NAME] [--property=Suite.Name]\n" +
    sc::input::option_help(sc::input::texts_of(kOptions), {22, '='}) +
    "Options taking a value also accept it as the next argument (--variant upstream).\n"
    "Exit status: 0 the property holds, 1 it fails, 2 bad arguments, a malformed case file, or\n"
    "a case the system under test cannot run (real Megatron code: no distributed or gathered\n"
    "checkpoints, no chosen stream order or pinned memory).\n";

int usage(const std::string& why) {
  std::cerr << "shardcheck-replay: " << why << "\n" << kUsage;
  return sc::input::kExitBadInput;
}

// The request of `args`, or the exit status when there is nothing to replay.
std::variant<Request, int> parse(const std::vector<std::string>& args) {
  Request request;
  bool help = false;
  if (auto why = sc::input::apply_args(args, kOptions, request, help)) return usage(*why);
  if (help) {
    std::cout << kUsage;
    return sc::input::kExitOk;
  }
  if (request.path.empty()) return usage("no case file given");
  return request;
}

// The case file at `path`, or the exit status after naming what is wrong with it.
std::variant<sc::props::CaseFile, int> read_case_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return usage("cannot read case file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return sc::props::parse_case_file(text.str());
  } catch (const sc::props::CaseFileError& e) {
    std::cerr << "shardcheck-replay: " << path << ": " << e.what() << "\n";
    return sc::input::kExitBadInput;
  }
}

// The one line that says what is replayed.
void print_case(const std::string& property, const std::string& variant,
                const sc::props::CaseInputs& inputs) {
  std::cout << "replay: " << property << " variant=" << variant << " case=";
  sc::model::showValue(inputs.c, std::cout);
  std::cout << " ";
  sc::gen::showValue(inputs.schedule, std::cout);
  std::cout << " split=" << inputs.split << " other_fraction=" << inputs.other_fraction;
  if (!inputs.map_location.empty()) std::cout << " map_location=" << inputs.map_location;
  if (!inputs.commands.empty()) {
    std::cout << " rank=" << inputs.rank << " commands=" << inputs.commands.size();
  }
  std::cout << "\n";
}

// Runs `property`'s check once on `inputs` against `behaviour`; the exit status.
int replay(const sc::props::Property& property, const sc::props::CaseInputs& inputs,
           const sc::sut::Behaviour& behaviour) {
  // One RapidCheck case that draws nothing: RC_ASSERT, RC_LOG and RC_PRE work as in the suite.
  sc::props::RunOptions once;
  once.max_success = 1;
  once.shrink = false;
  std::string not_run;  // why the case cannot run on this system under test, if it cannot
  const sc::props::RunOutcome r = sc::props::run_property(
      [&] {
        try {
          property.check(inputs, behaviour);
        } catch (const sc::rig::NotRunAgainstRealCode& e) {
          not_run = e.what();
        }
      },
      once);
  if (!not_run.empty()) {
    std::cerr << "shardcheck-replay: this case cannot run here: " << not_run << "\n";
    return sc::input::kExitBadInput;
  }
  if (r.failed()) {
    std::cout << "FAIL: " << r.description << "\n";
    return sc::input::kExitCheckFailed;
  }
  if (r.kind == sc::props::RunOutcome::Kind::kGaveUp) {
    std::cout << "the property discards this case (a precondition does not hold): "
              << r.description << "\n";
    return sc::input::kExitBadInput;
  }
  std::cout << "PASS\n";
  return sc::input::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = parse(std::vector<std::string>(argv + 1, argv + argc));
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  const Request& request = std::get<Request>(parsed);
  const auto read = read_case_file(request.path);
  if (const int* status = std::get_if<int>(&read)) return *status;
  const sc::props::CaseFile& file = std::get<sc::props::CaseFile>(read);
  if (file.megatron && !request.variant && !sc::props::real_code_under_test()) {
    std::cerr << "shardcheck-replay: " << request.path << " failed against Megatron "
              << file.megatron->tree << ": replay it there with scripts/verify-megatron --case "
              << request.path << " (or give --variant to run it on the port)\n";
    return sc::input::kExitBadInput;
  }
  const std::string variant = request.variant ? *request.variant
                              : file.variant.empty() ? sc::sut::fully_patched().name
                                                     : file.variant;
  const std::string property = request.property ? *request.property : file.property;
  if (property.empty()) {
    return usage(request.path + ": the file names no property: give --property");
  }
  const auto behaviour = sc::sut::behaviour_by_name(variant);
  if (!behaviour) return usage("--variant: no variant or mutant named '" + variant + "'");
  const sc::props::Property* def = sc::props::find_property(property);
  if (def == nullptr) return usage("--property: no property named '" + property + "'");
  if (!def->check) {
    return usage("--property: " + property + " draws inputs a case file does not hold");
  }
  print_case(property, variant, file.inputs);
  return replay(*def, file.inputs, *behaviour);
}
