#include "properties/overlap_props.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "properties/rank_checks.h"
#include "properties/support.h"
#include "properties/wrapper_props.h"

namespace sc::props {

namespace {

// A permutation of 0..n-1: the indices sorted by drawn keys (shrinking toward the identity).
rc::Gen<std::vector<int>> permutation(size_t n) {
  return rc::gen::map(rc::gen::container<std::vector<int>>(n, rc::gen::inRange(0, 8)),
                      [](const std::vector<int>& keys) {
                        std::vector<int> order(keys.size());
                        std::iota(order.begin(), order.end(), 0);
                        std::stable_sort(order.begin(), order.end(),
                                         [&](int a, int b) { return keys[a] < keys[b]; });
                        return order;
                      });
}

}  // namespace

rc::Gen<rig::OverlapCall> overlap_training_call() {
  return rc::gen::exec([] {
    rig::OverlapCall call;
    const size_t n = *rc::gen::inRange<size_t>(2, 5);
    call.params = *rc::gen::container<std::vector<rig::WrapperParam>>(
        n, wrapper_param(/*may_be_half=*/true, /*may_be_expert=*/false));
    call.order = *permutation(n);
    int64_t total = 0;
    for (const auto& p : call.params) total += static_cast<int64_t>(p.initial.size());
    call.bucket_size = *rc::gen::oneOf(rc::gen::just<int64_t>(1),
                                       rc::gen::inRange<int64_t>(1, total + 1));
    call.grads = *wrapper_grads(call.params, *rc::gen::inRange<size_t>(2, 4));
    return call;
  });
}

bool forward_order_differs(const rig::OverlapCall& call) {
  return !std::is_sorted(call.order.begin(), call.order.end());
}

void run_overlap_property(const rig::OverlapCall& call, const sut::Behaviour& b) {
  rig::MegatronTarget tree = tree_or_fail();
  tree.cuda = device().is_cuda();
  const rig::OverlapOutcome got = rig::run_overlap_training(tree, call);
  if (got.overlapped_raised) check("with overlap_param_gather: " + *got.overlapped_raised, b);
  if (got.synchronous_raised) check("without overlap_param_gather: " + *got.synchronous_raised, b);
  for (size_t k = 0; k < std::min(got.overlapped.size(), got.synchronous.size()); ++k) {
    const std::string d = first_difference(got.overlapped[k], got.synchronous[k]);
    if (!d.empty()) {
      check("after step " + std::to_string(k + 1) + ", the overlapped run differs from the "
            "synchronous one: " + d, b);
    }
  }
}

Property overlap_property() {
  Property p;
  p.name = "DdpOverlap.ParamGatherOverlappedWithTheForwardEqualsSynchronous";
  p.claim =
      "training steps through Megatron's DistributedDataParallel (overlap_grad_reduce) and "
      "DistributedOptimizer, with the param all-gather dispatched by DDP's forward pre-hooks "
      "(overlap_param_gather) over modules the forward calls in a drawn order, raise nothing "
      "and leave every parameter after every step bit for bit as the same steps with the "
      "all-gather after the step do";
  draw_in_body(p, overlap_training_call, run_overlap_property);
  p.not_on_port =
      "the port's DDP has no forward pre-hooks and gathers no parameter: it drives real "
      "Megatron code only";
  p.history_killers = {"G03"};
  return p;
}

}  // namespace sc::props
