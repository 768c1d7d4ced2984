#include "properties/support.h"

#include <cstdlib>
#include <iostream>

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
std::optional<sim::MegatronTarget> scoped_tree;  // set by a live RealCodeScope
}  // namespace

RealCodeScope::RealCodeScope(sim::MegatronTarget tree) { scoped_tree = std::move(tree); }

RealCodeScope::~RealCodeScope() {
  scoped_tree.reset();
  configure_generation();
}

std::optional<sim::MegatronTarget> megatron_tree() {
  if (scoped_tree) return scoped_tree;
  const char* tree = std::getenv("SC_MEGATRON_TREE");
  if (tree == nullptr || *tree == '\0') return std::nullopt;
  return sim::MegatronTarget{tree, false};
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

sim::Target target_for(const sut::Behaviour& behaviour) {
  sim::Target t{behaviour, device(), std::nullopt};
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
std::string step_outcome(sim::RankUnderTest& rank, const model::StepInputs& in) {
  try {
    rank.step(in);
    rank.model_values();  // the port may run the step's kernels only when something reads
    return "";
  } catch (const c10::Error& e) {
    return message_text(e.msg());
  } catch (const sim::MegatronRaised& e) {
    return message_text(e.what());
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
