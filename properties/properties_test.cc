// The gtest cases of the property suite, one per registered property (properties/registry.h),
// each run under RapidCheck with RC_PARAMS (seed, max_success, reproduce strings keyed by
// "Suite/Name") against what the property targets: the variant under test (SC_VARIANT, default
// the fully patched variant) on the system under test (SC_SUT: the port, or real Megatron code
// from SC_MEGATRON_TREE), its own fixed variant, the model alone, or the port against a tree.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "properties/registry.h"
#include "properties/run.h"
#include "properties/support.h"
#include "sim/input/args.h"

namespace sc::props {
namespace {

// The behaviour `p` runs against here.
sut::Behaviour target_of(const Property& p) {
  switch (p.target) {
    case Target::kVariant:
    case Target::kPortVsRealCode:
      return variant_under_test();
    case Target::kOwnVariant:
      return *sut::behaviour_by_name(p.own_variant);
    case Target::kModel:
      break;
  }
  return sut::upstream();  // ignored by model laws
}

class PropertyTest : public ::testing::Test {
 public:
  explicit PropertyTest(const Property* property) : property_(property) {}
  void TestBody() override {
    if (real_code_under_test() && !runs_on_real_code(*property_)) {
      GTEST_SKIP() << "not against real Megatron code: " << why_not_on_real_code(*property_);
    }
    if (!real_code_under_test() && !property_->not_on_port.empty()) {
      GTEST_SKIP() << "not on the port: " << property_->not_on_port;
    }
    if (property_->target == Target::kPortVsRealCode && !megatron_tree()) {
      GTEST_SKIP() << "needs a Megatron tree in SC_MEGATRON_TREE";
    }
    const sut::Behaviour behaviour = target_of(*property_);
    const std::string id = property_->name.substr(0, property_->name.find('.')) + "/" +
                           property_->name.substr(property_->name.find('.') + 1);
    RunOptions options;
    options.id = id;
    const RunOutcome out = run_property([&] { property_->body(behaviour); }, options);
    if (out.kind != RunOutcome::Kind::kPassed) {
      FAIL() << out.report << "\nvariant: " << behaviour.name << "\n";
    }
    std::cout << out.report << "\n";
  }

 private:
  const Property* property_;
};

const bool kRegistered = [] {
  for (const Property& p : all_properties()) {
    const size_t dot = p.name.find('.');
    ::testing::RegisterTest(p.name.substr(0, dot).c_str(), p.name.substr(dot + 1).c_str(),
                            nullptr, nullptr, __FILE__, __LINE__,
                            [&p]() -> ::testing::Test* { return new PropertyTest(&p); });
  }
  return true;
}();

}  // namespace
}  // namespace sc::props

// GoogleTest's main, but its value options also take `--name value` (the project's convention).
int main(int argc, char** argv) {
  std::vector<std::string> args = sc::input::joined_value_flags(
      std::vector<std::string>(argv, argv + argc), sc::input::kGoogleTestValueFlags);
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  int count = static_cast<int>(pointers.size());
  pointers.push_back(nullptr);  // argv[argc]: the parsers move entries down to it
  ::testing::InitGoogleTest(&count, pointers.data());
  sc::props::configure_generation();
  return RUN_ALL_TESTS();
}
