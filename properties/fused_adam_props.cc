#include "properties/fused_adam_props.h"

#include <cstring>

#include <rapidcheck.h>

#include "model/adamw.h"
#include "properties/gen/choice.h"
#include "properties/support.h"
#include "sim/rig/rng.h"
#include "sim/port/fused_adam.h"

namespace sc::props {

std::unique_ptr<sut::FusedAdam> one_group_fused_adam(const std::vector<torch::Tensor>& params,
                                                     const sut::Behaviour& behaviour) {
  const model::AdamWHyper& h = kFusedAdamHyper;
  sut::FusedAdamOptions o;
  o.lr(h.lr).beta1(h.beta1).beta2(h.beta2).eps(h.eps).weight_decay(h.weight_decay);
  std::vector<torch::optim::OptimizerParamGroup> groups{torch::optim::OptimizerParamGroup(params)};
  return std::make_unique<sut::FusedAdam>(groups, o, nullptr, sut::FusedAdamFlags{}, behaviour);
}

void run_fused_adam_property(const sut::Behaviour& behaviour) {
  const auto sizes = *rc::gen::resize(
      rc::kNominalSize,
      rc::gen::mapcat(gen::weighted_choice<int>({{3, 5}, {1, 70}}), [](int count) {
        return rc::gen::container<std::vector<int64_t>>(
            count, gen::weighted_one_of<int64_t>({{1, rc::gen::just<int64_t>(1)},
                                                  {3, rc::gen::inRange<int64_t>(1, 40)},
                                                  {1, rc::gen::just<int64_t>(0)}}));
      }));
  const int steps = *rc::gen::inRange(1, 5);
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  RC_CLASSIFY(!sizes.empty() && sizes.back() == 0, "last tensor empty");
  RC_CLASSIFY(sizes.size() > 64, "more than one launch");
  rig::SplitMix64 rng(seed);
  std::vector<torch::Tensor> params;
  std::vector<std::vector<float>> want;
  for (int64_t n : sizes) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = rng.symmetric_unit();
    want.push_back(v);
    params.push_back(torch::tensor(v).to(device()).requires_grad_(true));
  }
  const model::AdamWHyper& h = kFusedAdamHyper;
  const auto fused = one_group_fused_adam(params, behaviour);
  sut::FusedAdam& opt = *fused;
  std::vector<model::AdamWState32> states(sizes.size());
  for (int k = 1; k <= steps; ++k) {
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> g(static_cast<size_t>(sizes[t]));
      for (float& x : g) x = rng.symmetric_unit();
      params[t].mutable_grad() = torch::tensor(g).to(device());
      model::adamw_step_fused(want[t], g, states[t], h, k);
    }
    opt.step();
  }
  for (size_t t = 0; t < sizes.size(); ++t) {
    torch::Tensor got = params[t].detach().cpu().contiguous();
    if (sizes[t] == 0) continue;
    if (std::memcmp(got.data_ptr<float>(), want[t].data(), want[t].size() * sizeof(float)) != 0) {
      RC_LOG() << under_test(behaviour) << ": tensor " << t << " of " << sizes.size()
               << " (numel " << sizes[t] << ") differs from the FusedAdam reference\n";
      RC_FAIL("FusedAdam result differs");
    }
  }
}

}  // namespace sc::props
