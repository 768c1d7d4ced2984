#include "properties/buffer_groups_props.h"

#include <rapidcheck.h>

#include "model/layout.h"
#include "properties/checks.h"
#include "properties/gen/case_draws.h"
#include "properties/real_code_props.h"
#include "properties/support.h"
#include "sim/rig/rank_under_test.h"

namespace sc::props {

CaseInputs direct_caller_case() {
  CaseInputs in = gen::case_only();
  in.c.buffers_from_parallel_state = true;
  return in;
}

void run_buffer_groups_property(const CaseInputs& in, const sut::Behaviour& b) {
  model::CaseSpec handed = in.c, from_state = in.c;
  handed.buffers_from_parallel_state = false;
  from_state.buffers_from_parallel_state = true;
  const auto layouts = model::full_param_layout(in.c);
  for (model::Instance inst : {model::Instance::kDense, model::Instance::kExpert}) {
    if (!model::instance_present(in.c, inst)) continue;
    for (int64_t r : ranks_to_check(in.c, layouts, inst)) {
      const rig::RankObservation want =
          rig::build_rank(target_for(b), handed, inst, r, /*seed=*/r)->construction();
      const rig::RankObservation got =
          rig::build_rank(target_for(b), from_state, inst, r, /*seed=*/r)->construction();
      const auto v = construction_difference(want, got, "handed its groups",
                                             "groups from parallel_state");
      if (v) {
        RC_LOG() << under_test(b) << ": "
                 << (inst == model::Instance::kExpert ? "expert" : "dense") << " rank " << r
                 << ", the buffers built two ways: " << *v << "\n";
      }
      RC_ASSERT(!v);
    }
  }
}

}  // namespace sc::props
