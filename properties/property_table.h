// Every model-versus-port property as a named body taking the variant to check, so that the
// RC_GTEST_PROPs, the mutant tests and later tools run the very same claims.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sim/sut/behaviour.h"

namespace sc::props {

// One property: "Suite.Name" and a body that draws its own inputs and RC_ASSERTs its claim.
struct PropertyDef {
  std::string name;
  std::function<void(const sut::Behaviour&)> body;
};

// The stateful property's body (properties/hybrid_optimizer_state_props.cc).
void run_hybrid_optimizer_state_property(const sut::Behaviour& b);

// All diff properties, in a fixed order.
const std::vector<PropertyDef>& diff_properties();
// The property called `name` (aborts on an unknown name: a programming error).
const PropertyDef& diff_property(const std::string& name);

}  // namespace sc::props
