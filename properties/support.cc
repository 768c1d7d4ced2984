#include "properties/support.h"

#include <cstdlib>
#include <iostream>

#include "properties/gen/case_gen.h"
#include "sim/port/device.h"

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

RealCodeScope::RealCodeScope(sim::MegatronTarget tree) {
  scoped_tree = std::move(tree);
  gen::set_transformer_engine_available(false);
}

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

void configure_generation() {
  gen::set_transformer_engine_available(!real_code_under_test());
}

}  // namespace sc::props
