// Laws of the reference model's layout and ownership (no LibTorch involved).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "model/layout.h"
#include "model/shard.h"
#include "properties/checks.h"
#include "properties/gen/case_gen.h"

namespace sc::props {
namespace {

void classify(const model::CaseSpec& c, const std::vector<model::BufferLayout>& ls) {
  bool straddles = false, padding_only = false, several_buckets = false;
  for (const auto& l : ls) {
    several_buckets |= l.buckets.size() > 1;
    for (int64_t r = 0; r < l.dp && r < 64; ++r) {
      const auto br = model::buffer_ranges(l, r);
      size_t owned = 0;
      for (const auto& b : br.buckets) {
        owned += b.param_map.size();
        for (const auto& e : b.param_map) {
          straddles |= e.param_range.size() < c.params[e.param].numel();
        }
      }
      padding_only |= owned == 0;
    }
  }
  RC_CLASSIFY(straddles, "param straddles a rank boundary");
  RC_CLASSIFY(padding_only, "a rank owns only padding");
  RC_CLASSIFY(several_buckets, "several buckets");
}

RC_GTEST_PROP(ShardBuilderModel, RankShardsTileThePaddedBucketAndOwnEachElementOnce, ()) {
  const model::CaseSpec c = *gen::case_spec();
  const auto layouts = model::full_param_layout(c);
  classify(c, layouts);
  const Violation v = check_ownership(c, layouts);
  if (v) RC_LOG() << *v << "\n";
  RC_ASSERT(!v);
}

RC_GTEST_PROP(ShardBuilderModel, LayoutFollowsAlignmentOrderAndBucketRules, ()) {
  const model::CaseSpec c = *gen::case_spec();
  const auto layouts = model::full_param_layout(c);
  const Violation v = check_layout_rules(c, layouts);
  if (v) RC_LOG() << *v << "\n";
  RC_ASSERT(!v);
}

}  // namespace
}  // namespace sc::props
