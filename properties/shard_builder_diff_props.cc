// The LibTorch port against the reference model, on CPU (or CUDA where present).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "model/layout.h"
#include "model/shard.h"
#include "properties/checks.h"
#include "properties/diff_props.h"
#include "properties/gen/case_gen.h"
#include "properties/property_table.h"
#include "properties/support.h"

namespace sc::props {
namespace {

void run(const char* name) { diff_property(name).body(variant_under_test()); }

RC_GTEST_PROP(ShardBuilderDiff, PortRangesEqualModelOnEveryRank, ()) {
  run("ShardBuilderDiff.PortRangesEqualModelOnEveryRank");
}

RC_GTEST_PROP(ShardBuilderDiff, EveryOptimizerTensorIsALeafWithThePlannedAliasing, ()) {
  run("ShardBuilderDiff.EveryOptimizerTensorIsALeafWithThePlannedAliasing");
}

RC_GTEST_PROP(ShardBuilderDiff, ConstructionWithTheRebuildSucceedsOnEveryRank, ()) {
  run("ShardBuilderDiff.ConstructionWithTheRebuildSucceedsOnEveryRank");
}

RC_GTEST_PROP(ShardBuilderDiff, UpstreamFailsExactlyOnRanksOwningAnFp32Piece, ()) {
  // This claim is about upstream whatever SC_VARIANT says: it checks the model's prediction.
  run_diff_property(*gen::case_spec(), sut::upstream(), DiffClaim::kUpstreamFailingRanks);
}

}  // namespace
}  // namespace sc::props
