#include "properties/model_laws.h"

#include <algorithm>

#include <rapidcheck.h>

#include "model/layout.h"
#include "model/offload_plan.h"
#include "model/shard.h"
#include "properties/checks.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/choice.h"

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

}  // namespace

void shard_ownership_law() {
  const model::CaseSpec c = *gen::case_spec();
  const auto layouts = model::full_param_layout(c);
  classify(c, layouts);
  const Violation v = check_ownership(c, layouts);
  if (v) RC_LOG() << *v << "\n";
  RC_ASSERT(!v);
}

void layout_rules_law() {
  const model::CaseSpec c = *gen::case_spec();
  const auto layouts = model::full_param_layout(c);
  const Violation v = check_layout_rules(c, layouts);
  if (v) RC_LOG() << *v << "\n";
  RC_ASSERT(!v);
}

namespace {

rc::Gen<std::vector<std::vector<model::HdoTensor>>> hdo_groups() {
  return rc::gen::resize(rc::kNominalSize, rc::gen::exec([] {
    std::vector<std::vector<model::HdoTensor>> groups(*rc::gen::inRange(1, 4));
    for (auto& g : groups) {
      const int n = *rc::gen::inRange(0, 6);  // a rank may own nothing in a group
      for (int i = 0; i < n; ++i) {
        g.push_back(model::HdoTensor{*rc::gen::inRange<int64_t>(1, 5000),
                                     *gen::weighted_choice<model::DType>(
                                         {{1, model::DType::kFloat32},
                                          {1, model::DType::kBFloat16}})});
      }
    }
    return groups;
  }));
}

}  // namespace

void offload_prefix_law() {
  const auto groups = *hdo_groups();
  const double f = *rc::gen::inRange(0, 101) / 100.0;
  const double g = *rc::gen::inRange(0, 101) / 100.0;
  const Violation v = check_offload_laws(groups, std::min(f, g), std::max(f, g));
  if (v) RC_LOG() << *v << "\n";
  RC_ASSERT(!v);
}

}  // namespace sc::props
