#include "properties/support.h"

#include <rapidcheck.h>

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "properties/gen/case_gen.h"
#include "sim/port/device.h"
#include "sim/rig/megatron_worker.h"

namespace sc::props {

const sut::Behaviour& variant_under_test() {
  static const sut::Behaviour kVariant = [] {
    const char* name = std::getenv("SC_VARIANT");
    if (name == nullptr || *name == '\0') return sut::fully_patched();
    auto b = sut::behaviour_by_name(name);
    if (!b) {
      std::cerr << "SC_VARIANT=" << name << " names no variant\n";
      std::exit(2);
    }
    return *b;
  }();
  return kVariant;
}

torch::Device device() {
  static const torch::Device kDevice = sut::pick_device();
  return kDevice;
}

namespace {
std::optional<rig::MegatronTarget> scoped_tree;   // set by a live RealCodeScope
std::string scoped_name;                          // its name in messages
}  // namespace

RealCodeScope::RealCodeScope(rig::MegatronTarget tree, std::string name)
    : outer_tree_(scoped_tree), outer_name_(scoped_name) {
  scoped_name = name.empty() ? tree.tree : std::move(name);
  scoped_tree = std::move(tree);
}

RealCodeScope::~RealCodeScope() {
  scoped_tree = outer_tree_;
  scoped_name = outer_name_;
  if (!scoped_tree) configure_generation();
}

std::optional<rig::MegatronTarget> megatron_tree() {
  if (scoped_tree) return scoped_tree;
  const char* tree = std::getenv("SC_MEGATRON_TREE");
  if (tree == nullptr || *tree == '\0') return std::nullopt;
  return rig::MegatronTarget{tree, false};
}

rig::MegatronTarget tree_or_fail() {
  const auto tree = megatron_tree();
  if (!tree) RC_FAIL("this property runs real code: name a Megatron tree in SC_MEGATRON_TREE");
  return *tree;
}

bool real_code_under_test() {
  if (scoped_tree) return true;
  static const bool kReal = [] {
    const char* sut = std::getenv("SC_SUT");
    const std::string name = sut == nullptr ? "" : sut;
    if (name.empty() || name == "port") return false;
    if (name != "megatron") {
      std::cerr << "SC_SUT=" << name << " names no system under test (port, megatron)\n";
      std::exit(2);
    }
    if (!megatron_tree()) {
      std::cerr << "SC_SUT=megatron needs the tree in SC_MEGATRON_TREE\n";
      std::exit(2);
    }
    return true;
  }();
  return kReal;
}

namespace {

std::string base_name(const std::string& path) {
  return path.substr(path.find_last_of('/') + 1);
}

// A patch as a label names it: its id for ours ("pr6982", "F3", "S1": the name up to its first
// '-'), else its file name without ".patch".
std::string patch_label(const std::string& path) {
  std::string name = base_name(path);
  if (name.size() > 6 && name.compare(name.size() - 6, 6, ".patch") == 0) {
    name.resize(name.size() - 6);
  }
  const std::string id = name.substr(0, name.find('-'));
  const size_t digits = id.find_first_of("0123456789");
  const bool ours = (id[0] == 'F' || id[0] == 'S' || id.rfind("pr", 0) == 0) &&
                    digits != std::string::npos && digits <= 2 &&
                    id.find_first_not_of("0123456789", digits) == std::string::npos;
  return ours ? id : name;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

}  // namespace

std::string real_code_label(const std::string& tree, const std::vector<std::string>& patches) {
  std::string out = base_name(tree);
  for (size_t k = 0; k < patches.size(); ++k) {
    out += (k == 0 ? " with " : ", ") + patch_label(patches[k]);
  }
  return out;
}

std::string under_test(const sut::Behaviour& behaviour) {
  if (!real_code_under_test()) return "variant " + behaviour.name;
  if (scoped_tree) return "megatron " + scoped_name;
  const std::string name = env("SC_MEGATRON_NAME");
  if (name.empty()) return "megatron " + real_code_label(megatron_tree()->tree, {});
  std::vector<std::string> patches;
  std::istringstream lines(env("SC_MEGATRON_PATCHES"));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) patches.push_back(line);
  }
  return "megatron " + real_code_label(name, patches);
}

const char* tested_side() { return real_code_under_test() ? "megatron" : "port"; }

rig::Target target_for(const sut::Behaviour& behaviour) {
  rig::Target t{behaviour, device(), std::nullopt};
  if (real_code_under_test()) t.megatron = megatron_tree();
  return t;
}

namespace {

// A message's first line without a leading exception type ("RuntimeError: ").
std::string message_text(const std::string& message) {
  std::string line = message.substr(0, message.find('\n'));
  const size_t colon = line.find(": ");
  const bool typed = colon != std::string::npos && colon >= 5 &&
                     line.compare(colon - 5, 5, "Error") == 0 &&
                     line.find(' ') == colon + 1;
  if (!typed) return line;
  // A bare `assert` raises its type with no message: the type is the message then.
  return colon + 2 == line.size() ? line.substr(0, colon) : line.substr(colon + 2);
}

}  // namespace

// What one step raised, in message_text's words ("" when it returned): the port's c10::Error and
// the worker's reply say the same thing there.
std::string step_outcome(rig::RankUnderTest& rank, const model::StepInputs& in) {
  try {
    rank.step(in);
    rank.model_values();  // the port may run the step's kernels only when something reads
    return "";
  } catch (const c10::Error& e) {
    return message_text(e.msg());
  } catch (const rig::MegatronRaised& e) {
    return message_text(e.what());
  }
}

std::string raised_by(const std::function<void()>& f) {
  try {
    f();
    return "";
  } catch (const c10::Error& e) {
    return e.msg().substr(0, e.msg().find('\n'));
  } catch (const rig::MegatronRaised& e) {
    const std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
}

void configure_generation() {
  const char* te = std::getenv("SC_TRANSFORMER_ENGINE");
  const std::string value = te == nullptr ? "" : te;
  if (!value.empty() && value != "on" && value != "off") {
    std::cerr << "SC_TRANSFORMER_ENGINE=" << value << " is neither on nor off\n";
    std::exit(2);
  }
  gen::set_transformer_engine_available(value != "off");
}

}  // namespace sc::props
