// Laws of the model's offload plan: the greedy whole-tensor prefix.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "model/offload_plan.h"
#include "properties/checks.h"
#include "properties/gen/choice.h"

namespace sc::props {
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

RC_GTEST_PROP(OffloadPlanModel, GreedyPrefixMonotoneInTheFraction, ()) {
  const auto groups = *hdo_groups();
  const double f = *rc::gen::inRange(0, 101) / 100.0;
  const double g = *rc::gen::inRange(0, 101) / 100.0;
  const Violation v = check_offload_laws(groups, std::min(f, g), std::max(f, g));
  if (v) RC_LOG() << *v << "\n";
  RC_ASSERT(!v);
}

}  // namespace
}  // namespace sc::props
