// Stateful test of the distributed optimizer with the hybrid optimizer inside (the body and its
// commands are in hybrid_state.cc).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "properties/property_table.h"
#include "properties/support.h"

namespace sc::props {
namespace {

RC_GTEST_PROP(HybridOptimizerState, CommandSequencesMatchTheReference, ()) {
  diff_property("HybridOptimizerState.CommandSequencesMatchTheReference")
      .body(variant_under_test());
}

}  // namespace
}  // namespace sc::props
