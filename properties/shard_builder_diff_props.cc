// The LibTorch port against the reference model, on CPU (or CUDA where present).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "model/layout.h"
#include "model/shard.h"
#include "properties/checks.h"
#include "properties/diff_props.h"
#include "properties/gen/case_gen.h"
#include "properties/support.h"

namespace sc::props {
namespace {

RC_GTEST_PROP(ShardBuilderDiff, PortRangesEqualModelOnEveryRank, ()) {
  run_diff_property(*gen::case_spec(), variant_under_test(), DiffClaim::kRanges);
}

RC_GTEST_PROP(ShardBuilderDiff, EveryOptimizerTensorIsALeafWithThePlannedAliasing, ()) {
  run_diff_property(*gen::case_spec(), variant_under_test(), DiffClaim::kInstalled);
}

RC_GTEST_PROP(ShardBuilderDiff, ConstructionWithTheRebuildSucceedsOnEveryRank, ()) {
  run_diff_property(*gen::case_spec(), variant_under_test(), DiffClaim::kConstructs);
}

RC_GTEST_PROP(ShardBuilderDiff, UpstreamFailsExactlyOnRanksOwningAnFp32Piece, ()) {
  // This claim is about upstream whatever SC_VARIANT says: it checks the model's prediction.
  run_diff_property(*gen::case_spec(), sut::upstream(), DiffClaim::kUpstreamFailingRanks);
}

}  // namespace
}  // namespace sc::props
