#include "properties/wrapper_props.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "properties/gen/choice.h"
#include "properties/rank_checks.h"
#include "properties/support.h"

namespace sc::props {

namespace {

using Values = std::vector<std::vector<float>>;

// k / 64 for k in [-128, 128]: exact in bf16 for |k| < 256.
rc::Gen<float> small_value() {
  return rc::gen::map(rc::gen::inRange<int>(-128, 129),
                      [](int k) { return std::ldexp(static_cast<float>(k), -6); });
}

rc::Gen<std::vector<int64_t>> wrapper_shape() {
  return gen::weighted_one_of<std::vector<int64_t>>(
      {{2, rc::gen::map(rc::gen::inRange<int64_t>(1, 7),
                        [](int64_t n) { return std::vector<int64_t>{n}; })},
       {1, rc::gen::apply([](int64_t a, int64_t b) { return std::vector<int64_t>{a, b}; },
                          rc::gen::inRange<int64_t>(1, 4), rc::gen::inRange<int64_t>(1, 4))}});
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

rc::Gen<rig::WrapperParam> wrapper_param(bool may_be_bf16) {
  const auto bf16 = may_be_bf16 ? gen::weighted_choice<bool>({{2, true}, {1, false}})
                                : rc::gen::just(false);
  return rc::gen::mapcat(rc::gen::pair(bf16, wrapper_shape()), [](const auto& drawn) {
    return rc::gen::map(
        rc::gen::container<std::vector<float>>(static_cast<size_t>(numel(drawn.second)),
                                               small_value()),
        [drawn](std::vector<float> initial) {
          return rig::WrapperParam{drawn.first, drawn.second, std::move(initial)};
        });
  });
}

// The steps' grads, one list per parameter of its size.
rc::Gen<std::vector<std::vector<std::vector<float>>>> wrapper_grads(
    const std::vector<rig::WrapperParam>& params, size_t steps) {
  std::vector<rc::Gen<std::vector<float>>> per_param;
  const auto element = rc::gen::map(rc::gen::inRange<int>(-4096, 4097), [](int k) {
    return std::ldexp(static_cast<float>(k), -10);
  });
  for (const auto& p : params) {
    per_param.push_back(
        rc::gen::container<std::vector<float>>(static_cast<size_t>(numel(p.shape)), element));
  }
  const auto one_step = rc::gen::exec([per_param] {
    std::vector<std::vector<float>> step;
    for (const auto& g : per_param) step.push_back(*g);
    return step;
  });
  return rc::gen::container<std::vector<std::vector<std::vector<float>>>>(steps, one_step);
}

const char* class_of(rig::Wrapper w) {
  switch (w) {
    case rig::Wrapper::kFloat16:
      return "Float16OptimizerWithFloat16Params";
    case rig::Wrapper::kFp32:
      return "FP32Optimizer";
    case rig::Wrapper::kDistributed:
      return "DistributedOptimizer";
  }
  return "?";
}

// The first element where `got` and `want` differ in their bits, named; "" when none does.
std::string first_difference(const Values& got, const Values& want) {
  if (got.size() != want.size()) return "different parameter counts";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i].size() != want[i].size()) return "p" + std::to_string(i) + ": different sizes";
    for (size_t e = 0; e < got[i].size(); ++e) {
      if (std::memcmp(&got[i][e], &want[i][e], sizeof(float)) == 0) continue;
      std::ostringstream os;
      os.precision(9);
      os << "p" << i << "[" << e << "] is " << got[i][e] << ", not " << want[i][e];
      return os.str();
    }
  }
  return "";
}

}  // namespace

rc::Gen<rig::WrapperCall> wrapper_lifecycle_call() {
  return rc::gen::exec([] {
    rig::WrapperCall call;
    call.wrapper = *rc::gen::resize(
        rc::kNominalSize,
        gen::weighted_choice<rig::Wrapper>({{3, rig::Wrapper::kFloat16},
                                            {2, rig::Wrapper::kFp32},
                                            {1, rig::Wrapper::kDistributed}}));
    // The distributed optimizer's trainable ranks are the other properties' subject.
    // At every size: RapidCheck's ranges favour the first entry at small sizes.
    const auto one_in = [](size_t n) {
      return rc::gen::resize(rc::kNominalSize, gen::weighted_choice<bool>({{n - 1, false},
                                                                          {1, true}}));
    };
    call.frozen = call.wrapper == rig::Wrapper::kDistributed || *one_in(3);
    call.transformer_engine = *one_in(4);
    const size_t n = *rc::gen::inRange<size_t>(1, 4);
    const bool bf16 = call.wrapper != rig::Wrapper::kFp32;
    call.params = *rc::gen::container<std::vector<rig::WrapperParam>>(n, wrapper_param(bf16));
    const size_t steps = *rc::gen::inRange<size_t>(1, 4);
    call.grads = *wrapper_grads(call.params, steps);
    call.save_after = *rc::gen::inRange<int>(0, static_cast<int>(steps) + 1);
    call.load_optimizer = call.save_after > 0 && !*one_in(3);
    return call;
  });
}

void run_wrapper_lifecycle_property(const rig::WrapperCall& call, const sut::Behaviour& b) {
  rig::MegatronTarget tree = tree_or_fail();
  tree.cuda = device().is_cuda();
  const rig::WrapperOutcome got = rig::run_wrapper_lifecycle(tree, call);
  const std::string what = std::string(rig::wrapper_name(call.wrapper)) +
                           (call.frozen ? " optimizer of a frozen rank" : " optimizer");
  if (got.raised) check(what + ": " + *got.raised, b);
  if (got.optimizer != class_of(call.wrapper) || got.stub != call.frozen) {
    check(what + ": the factory built " + (got.stub ? "a stub " : "a trainable ") +
              got.optimizer + ", not " + (call.frozen ? "a stub " : "a trainable ") +
              class_of(call.wrapper),
          b);
  }
  const std::string resumed = first_difference(got.resumed, got.reference);
  if (!resumed.empty()) {
    check(what + ": resumed with " +
              (call.load_optimizer ? "the optimizer state, it differs from no interruption: "
                                   : "the weights only, it differs from a fresh optimizer: ") +
              resumed,
          b);
  }
  if (call.frozen) {
    const std::string moved = first_difference(got.uninterrupted, got.reference);
    if (!moved.empty()) check(what + ": a frozen parameter changed: " + moved, b);
  }
}

}  // namespace sc::props
