// The port's FusedAdam against the model's FusedAdam order.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "properties/property_table.h"
#include "properties/support.h"

namespace sc::props {
namespace {

RC_GTEST_PROP(FusedAdamDiff, EveryTensorFollowsTheFusedOrderEmptyOnesIncluded, ()) {
  diff_property("FusedAdamDiff.EveryTensorFollowsTheFusedOrderEmptyOnesIncluded")
      .body(variant_under_test());
}

}  // namespace
}  // namespace sc::props
