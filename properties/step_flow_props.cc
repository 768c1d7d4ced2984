#include "properties/step_flow_props.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include <rapidcheck.h>

#include "model/grad_stats.h"
#include "model/reference.h"
#include "properties/gen/case_draws.h"
#include "properties/gen/choice.h"
#include "properties/rank_checks.h"
#include "properties/support.h"
#include "sim/rig/grad_norm_call.h"
#include "sim/rig/rank_under_test.h"
#include "sim/rig/tolerances.h"

namespace sc::props {

namespace {

// Step `k`'s grads: the schedule's, times `scale`, with `injected` on top.
model::StepInputs scaled_inputs(const model::CaseSpec& spec, const gen::Schedule& schedule,
                                size_t k, float scale, const std::vector<InjectedGrad>& injected) {
  model::StepInputs in = gen::materialise(spec, schedule.steps[k]);
  if (scale != 1.0f) {
    for (auto& g : in.grads) {
      for (float& x : g) x *= scale;
    }
  }
  for (const InjectedGrad& n : injected) {
    if (n.step != k || n.param >= in.grads.size() || in.grads[n.param].empty()) continue;
    in.grads[n.param][n.element % in.grads[n.param].size()] = n.value;
  }
  return in;
}

// The port's loss scaler against the model's, after step `k` (1-based).
void check_scaler(const rig::RankUnderTest& rig, const model::GradScalerModel& want,
                  const model::RankPlan& plan, int k, const sut::Behaviour& b) {
  const auto got = rig.grad_scaler_state();
  if (got && *got == want.state()) return;
  std::ostringstream os;
  os.precision(9);
  os << "rank " << plan.rank << " after step " << k << ": loss scaler ";
  if (got) {
    os << "scale " << got->scale << ", trackers " << got->growth_tracker << "/"
       << got->hysteresis_tracker;
  } else {
    os << "missing";
  }
  os << "; model scale " << want.state().scale << ", trackers " << want.state().growth_tracker
     << "/" << want.state().hysteresis_tracker;
  check(os.str(), b);
}

}  // namespace

void run_found_inf_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            const model::GradScalerConfig& scaler,
                            const std::vector<InjectedGrad>& injected,
                            const sut::Behaviour& behaviour) {
  const model::TorchCpuKernels kernels = torch_kernels();
  bool skipped = false, overflowed = false;
  for_checked_ranks(spec, [&](model::Instance inst, int64_t r, const auto& layouts) {
    const auto owned = rig::build_rank(target_for(behaviour), spec, inst, r, /*seed=*/1000 + r);
    rig::RankUnderTest& rig = *owned;
    check(check_constructed(rig.construction()), behaviour);
    const model::RankPlan plan = model::plan_rank(spec, layouts, inst, r);
    model::RankReference ref(spec, plan, rig.initial_values(), kernels, device().is_cuda());
    if (ref.step_error()) return;  // a step that raises is the numerical properties' claim
    rig.use_grad_scaler(scaler);
    model::GradScalerModel want(scaler);
    for (size_t k = 0; k < schedule.steps.size(); ++k) {
      const model::StepInputs in = scaled_inputs(spec, schedule, k, want.state().scale, injected);
      model::StepInputs ref_in = in;
      ref_in.inv_scale = want.inv_scale();
      ref_in.skip = model::grads_non_finite(spec, inst, in);
      skipped = skipped || ref_in.skip;
      overflowed = overflowed || (ref_in.skip && !model::grads_non_finite(
                                                     spec, inst, scaled_inputs(spec, schedule, k,
                                                                               1.0f, injected)));
      rig.step(in);
      ref.step(ref_in);
      want.update(ref_in.skip);
      const int step = static_cast<int>(k + 1);
      check_scaler(rig, want, plan, step, behaviour);
      for (size_t g = 0; g < plan.groups.size(); ++g) {
        for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
          check_entry(spec, plan, ref, rig, g, i, step, NumericClaim::kModelParams, behaviour);
          if (ref.state(g, i).step > 0) {
            check_entry(spec, plan, ref, rig, g, i, step, NumericClaim::kState, behaviour);
          }
        }
      }
    }
  });
  RC_CLASSIFY(skipped, "a step skipped");
  RC_CLASSIFY(overflowed, "the scale overflowed a 16-bit grad");
  RC_CLASSIFY(scaler.dynamic, "dynamic scaler");
}
namespace {

std::string step_name(const model::RankPlan& plan, int step) {
  return std::string(plan.instance == model::Instance::kExpert ? "expert" : "dense") + " rank " +
         std::to_string(plan.rank) + " step " + std::to_string(step);
}

// Whether a rounded norm may leave its range, so that infinity is right: the square of the
// norm in fp32, or a per-tensor norm in a 16-bit dtype (fp16's squares themselves where
// LibTorch's CPU kernels accumulate fp16 in fp16). A shard's norm is at most its parameter's.
bool norm_may_overflow(const model::CaseSpec& spec, model::Instance instance,
                       const model::StepInputs& in, double exact, double tol) {
  if (exact + tol >= std::sqrt(model::max_finite(model::DType::kFloat32))) return true;
  for (size_t p = 0; p < spec.params.size(); ++p) {
    const model::ParamSpec& param = spec.params[p];
    if (param.is_expert != (instance == model::Instance::kExpert)) continue;
    const model::DType d = model::main_grad_dtype(spec, param);
    if (d == model::DType::kFloat32) continue;
    double limit = model::max_finite(d);
    if (d == model::DType::kFloat16 && !device().is_cuda()) limit = std::sqrt(limit);
    const double norm = model::exact_param_grad_norm(spec, p, in);
    if (norm > 0.0 && norm * (1 + tol / exact) >= limit) return true;
  }
  return false;
}

// The reported norm against the exact one, within tol::grad_norm, or infinity where a rounded
// norm may overflow. Returns false where tol::grad_norm gives no bound.
bool check_grad_norm(const model::CaseSpec& spec, const model::RankPlan& plan, int step,
                     const model::StepInputs& in, double got, const sut::Behaviour& b) {
  const double exact = model::exact_grad_norm(spec, plan.instance, in);
  const model::GradNormShape shape = model::grad_norm_shape(spec, plan.instance);
  tol::GradNormTerms terms;
  terms.largest = shape.largest;
  terms.tensors = shape.tensors;
  terms.elements = shape.elements;
  terms.ranks = model::instance_dp(spec, plan.instance);
  terms.grad_mantissa_bits = model::mantissa_bits(shape.dtype);
  terms.grad_min_subnormal = shape.min_subnormal;
  const double tol = tol::grad_norm(exact, terms);
  if (std::isinf(got) ? norm_may_overflow(spec, plan.instance, in, exact, tol)
                      : std::fabs(got - exact) <= tol) {
    return !std::isinf(tol);
  }
  std::ostringstream os;
  os.precision(17);
  os << step_name(plan, step) << ": grad norm " << got << ", exact " << exact << " (difference "
     << std::fabs(got - exact) << ", tolerance " << tol << ")";
  check(os.str(), b);
  return true;
}

// One step's report against the model; returns the inputs the reference steps with (clipped
// by the coefficient of the reported norm). `bounded` turns false where the norm had no bound.
model::StepInputs check_report(const model::CaseSpec& spec, const model::RankPlan& plan, int step,
                               const model::StepInputs& in, const rig::StepReport& got,
                               double clip_grad, bool log_num_zeros, bool& bounded,
                               const sut::Behaviour& b) {
  if (in.skip) {
    if (got.success || got.grad_norm || got.num_zeros_in_grad) {
      check(step_name(plan, step) + ": inf/NaN in the grads, but the step reported success or "
            "grad statistics", b);
    }
    return in;
  }
  if (!got.success || !got.grad_norm || !got.num_zeros_in_grad) {
    check(step_name(plan, step) + ": the step did not report success, a norm and a count", b);
  }
  model::StepInputs ref_in = in;
  if (clip_grad > 0.0) {
    bounded = check_grad_norm(spec, plan, step, in, *got.grad_norm, b) && bounded;
    ref_in.clip_coeff = model::clip_coefficient(clip_grad, *got.grad_norm);
  } else if (*got.grad_norm != 0.0) {
    check(step_name(plan, step) + ": a grad norm reported without clipping", b);
  }
  const int64_t zeros =
      log_num_zeros ? model::zeros_in_main_grads(spec, plan.instance, ref_in)
                    : 0;
  if (*got.num_zeros_in_grad != zeros) {
    check(step_name(plan, step) + ": " + std::to_string(*got.num_zeros_in_grad) +
              " zeros in the grads; the model counts " + std::to_string(zeros),
          b);
  }
  return ref_in;
}

}  // namespace

namespace {

// What a grad-stats run saw, for the classes.
struct GradStatsSeen {
  bool clipped = false, clipping_zeroed = false, bounded = true, skipped = false;
};

// One rank of `inst` through the schedule with grad stats and, given `scaler`, a loss scaler:
// the grads scaled by the model scaler's scale, a step with inf/NaN skipped before any norm.
void run_rank_with_grad_stats(const model::CaseSpec& spec, const gen::Schedule& schedule,
                              double clip_factor, bool log_num_zeros,
                              const std::optional<model::GradScalerConfig>& scaler,
                              const std::vector<InjectedGrad>& injected, model::Instance inst,
                              int64_t r, const std::vector<model::BufferLayout>& layouts,
                              const sut::Behaviour& b, GradStatsSeen& seen) {
  const auto owned = rig::build_rank(target_for(b), spec, inst, r, /*seed=*/1000 + r);
  rig::RankUnderTest& rig = *owned;
  check(check_constructed(rig.construction()), b);
  const model::RankPlan plan = model::plan_rank(spec, layouts, inst, r);
  model::RankReference ref(spec, plan, rig.initial_values(), torch_kernels(), device().is_cuda());
  if (ref.step_error()) return;  // a step that raises is the numerical properties' claim
  const double first =
      model::exact_grad_norm(spec, inst, scaled_inputs(spec, schedule, 0, 1.0f, injected));
  const double clip_grad = clip_factor * (first > 0.0 && std::isfinite(first) ? first : 1.0);
  std::optional<model::GradScalerModel> want;
  if (scaler) {
    rig.use_grad_scaler(*scaler);
    want.emplace(*scaler);
  }
  rig.use_grad_stats(clip_grad, log_num_zeros);
  for (size_t k = 0; k < schedule.steps.size(); ++k) {
    const int step = static_cast<int>(k + 1);
    model::StepInputs in =
        scaled_inputs(spec, schedule, k, want ? want->state().scale : 1.0f, injected);
    rig.step(in);
    if (want) {
      in.inv_scale = want->inv_scale();
      in.skip = model::grads_non_finite(spec, inst, in);
      want->update(in.skip);
    }
    const model::StepInputs ref_in = check_report(spec, plan, step, in, rig.last_step(),
                                                  clip_grad, log_num_zeros, seen.bounded, b);
    seen.skipped = seen.skipped || in.skip;
    seen.clipped = seen.clipped || (!in.skip && ref_in.clip_coeff < 1.0);
    seen.clipping_zeroed =
        seen.clipping_zeroed || (!in.skip && model::zeros_in_main_grads(spec, inst, ref_in) >
                                                 model::zeros_in_main_grads(spec, inst, in));
    ref.step(ref_in);
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      for (size_t i = 0; i < plan.groups[g].installed.size(); ++i) {
        check_entry(spec, plan, ref, rig, g, i, step, NumericClaim::kModelParams, b);
        if (ref.state(g, i).step > 0) {
          check_entry(spec, plan, ref, rig, g, i, step, NumericClaim::kState, b);
        }
      }
    }
  }
}

}  // namespace

void run_grad_stats_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                             double clip_factor, bool log_num_zeros,
                             const std::optional<model::GradScalerConfig>& scaler,
                             const std::vector<InjectedGrad>& injected,
                             const sut::Behaviour& behaviour) {
  GradStatsSeen seen;
  for_checked_ranks(spec, [&](model::Instance inst, int64_t r, const auto& layouts) {
    run_rank_with_grad_stats(spec, schedule, clip_factor, log_num_zeros, scaler, injected, inst,
                             r, layouts, behaviour, seen);
  });
  const bool fp16 = model::grad_norm_shape(spec, model::Instance::kDense).has_fp16 ||
                    model::grad_norm_shape(spec, model::Instance::kExpert).has_fp16;
  RC_CLASSIFY(clip_factor > 0.0 && fp16, "clipped fp16 decoupled grads");
  RC_CLASSIFY(seen.clipped, "clipped");
  RC_CLASSIFY(scaler.has_value(), "loss scaler");
  RC_CLASSIFY(seen.skipped, "a step skipped");
  RC_CLASSIFY(!seen.bounded, "no first-order bound on the norm");
  RC_CLASSIFY(seen.clipping_zeroed, "clipping made zeros");
  RC_CLASSIFY(log_num_zeros, "zeros counted");
  RC_CLASSIFY(spec.precision_aware, "precision-aware");
  RC_CLASSIFY(spec.cpu_offload, "offload");
}

rc::Gen<model::GradScalerConfig> factory_scaler() {
  return rc::gen::exec([] {
    model::GradScalerConfig c;
    c.dynamic = *gen::weighted_choice<bool>({{3, true}, {1, false}});
    c.initial_scale = static_cast<float>(int64_t{1} << *rc::gen::inRange(0, 19));
    c.growth_interval = *rc::gen::inRange<int64_t>(1, 4);
    c.hysteresis = *rc::gen::inRange<int64_t>(1, 4);
    return c;
  });
}

rc::Gen<std::vector<InjectedGrad>> injected_grads(const model::CaseSpec& c, const gen::Schedule& s,
                                                  size_t most, std::vector<float> values) {
  return rc::gen::resize(
      rc::kNominalSize,
      rc::gen::container<std::vector<InjectedGrad>>(
          *rc::gen::inRange<size_t>(0, most + 1),
          // By value: RapidCheck runs this again while shrinking, after this frame is gone.
          rc::gen::exec([steps = s.steps.size(), params = c.params.size(), values] {
            InjectedGrad n;
            n.step = *rc::gen::inRange<size_t>(0, steps);
            n.param = *rc::gen::inRange<size_t>(0, params);
            n.element = *rc::gen::inRange<size_t>(0, 1 << 16);
            n.value = values[*rc::gen::inRange<size_t>(0, values.size())];
            return n;
          })));
}

FoundInfDraw draw_found_inf() {
  FoundInfDraw d;
  d.c = *gen::case_spec();
  d.s = *gen::schedule(d.c, gen::kMaxSteps);
  d.scaler = *rc::gen::resize(rc::kNominalSize, factory_scaler());
  const float inf = std::numeric_limits<float>::infinity();
  d.injected = *injected_grads(d.c, d.s, 2, {inf, -inf, std::numeric_limits<float>::quiet_NaN()});
  return d;
}

namespace {

// One grad of a direct norm call: 1 to 70 elements, each 0 or +-k / 256 with k in [1, 2^16).
rc::Gen<std::vector<float>> direct_norm_grad() {
  const auto element = gen::weighted_one_of<float>(
      {{1, rc::gen::just(0.0f)},
       {4, rc::gen::map(rc::gen::inRange<int>(-65535, 65536),
                        [](int k) { return std::ldexp(static_cast<float>(k), -8); })}});
  return rc::gen::mapcat(rc::gen::inRange<size_t>(1, 71), [element](size_t n) {
    return rc::gen::container<std::vector<float>>(n, element);
  });
}

// The tolerance of a direct call's norm against the exact one (tol::direct_p_norm, tol::
// grad_norm for p = 2; the inf norm is exact).
double direct_norm_tolerance(const rig::GradNormCall& call, double exact) {
  tol::GradNormTerms t;
  t.ranks = static_cast<int64_t>(call.grads.size());
  for (const auto& rank : call.grads) {
    for (const auto& g : rank) {
      t.largest = std::max<int64_t>(t.largest, static_cast<int64_t>(g.size()));
      t.elements += static_cast<int64_t>(g.size());
      ++t.tensors;
    }
  }
  t.grad_min_subnormal = std::ldexp(1.0, -149);
  if (std::isinf(call.norm_type)) return 0.0;
  if (call.norm_type == 2.0) return tol::grad_norm(exact, t);
  return tol::direct_p_norm(exact, call.norm_type, t);
}

}  // namespace

rc::Gen<rig::GradNormCall> direct_grad_norm_call() {
  const auto rank_grads = gen::weighted_one_of<std::vector<std::vector<float>>>(
      {{1, rc::gen::just(std::vector<std::vector<float>>{})},
       {3, rc::gen::mapcat(rc::gen::inRange<size_t>(1, 4), [](size_t n) {
          return rc::gen::container<std::vector<std::vector<float>>>(n, direct_norm_grad());
        })}});
  const auto groups = rc::gen::mapcat(rc::gen::inRange<size_t>(1, 5), [rank_grads](size_t n) {
    return rc::gen::container<std::vector<std::vector<std::vector<float>>>>(n, rank_grads);
  });
  // At every size: RapidCheck's ranges favour the first entry at small sizes.
  const auto norm_types = rc::gen::resize(
      rc::kNominalSize,
      gen::weighted_choice<double>(
          {{2, 2.0}, {2, std::numeric_limits<double>::infinity()}, {1, 1.0}, {1, 3.0}}));
  return rc::gen::apply(
      [](std::vector<std::vector<std::vector<float>>> grads, double p) {
        return rig::GradNormCall{std::move(grads), p};
      },
      groups, norm_types);
}

bool has_rank_without_grads(const rig::GradNormCall& call) {
  return std::any_of(call.grads.begin(), call.grads.end(),
                     [](const auto& rank) { return rank.empty(); });
}

void run_direct_grad_norm_property(const rig::GradNormCall& call, const sut::Behaviour& b) {
  const rig::GradNormOutcome got = rig::call_grad_norm(target_for(b), call);
  std::ostringstream os;
  os.precision(17);
  os << "get_grad_norm_fp32 with norm type " << call.norm_type << " over " << call.grads.size()
     << " ranks";
  if (got.raising_rank) {
    const size_t r = static_cast<size_t>(*got.raising_rank);
    check(os.str() + ": rank " + std::to_string(r) + " (" +
              std::to_string(call.grads[r].size()) + " grads) raised " + got.raised,
          b);
  }
  std::vector<std::vector<float>> all;
  for (const auto& rank : call.grads) all.insert(all.end(), rank.begin(), rank.end());
  const double exact = model::exact_p_norm(all, call.norm_type);
  const double tol = direct_norm_tolerance(call, exact);
  RC_ASSERT(got.norms.size() == call.grads.size());
  for (size_t r = 0; r < got.norms.size(); ++r) {
    if (std::fabs(got.norms[r] - exact) <= tol && got.norms[r] == got.norms[0]) continue;
    os << ": rank " << r << " returned " << got.norms[r] << " (rank 0: " << got.norms[0]
       << "), exact " << exact << " (tolerance " << tol << ")";
    check(os.str(), b);
  }
}

}  // namespace sc::props
