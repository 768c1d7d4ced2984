// Bodies of the step-flow properties: the distributed optimizer's step with a loss scaler
// (unscaling, the found-inf skip) and with gradient statistics (clipping by the global grad
// norm, zero counting), each checked rank stepped alongside model::RankReference.
#pragma once

#include <optional>
#include <vector>

#include "model/grad_scaler.h"
#include "model/spec.h"
#include "properties/gen/case_gen.h"
#include "properties/gen/step_gen.h"
#include "sim/port/behaviour.h"
#include "sim/rig/grad_norm_call.h"

namespace sc::props {

// A grad element set to `value` before step `step` (0-based) of a schedule: parameter `param`,
// element `element` modulo its size.
struct InjectedGrad {
  size_t step = 0, param = 0, element = 0;
  float value = 0;
};

// The step flow with a loss scaler: every checked rank gets `scaler`, each step's grads are the
// schedule's multiplied by the model scaler's current scale, with `injected` on top. After every
// step the scaler's state and every owned piece (and, once stepped, the optimizer state) equal
// the reference, which skips exactly the steps whose grads hold inf or NaN anywhere in the
// instance (model::grads_non_finite) and unscales the others.
void run_found_inf_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                            const model::GradScalerConfig& scaler,
                            const std::vector<InjectedGrad>& injected,
                            const sut::Behaviour& behaviour);

// The step flow with gradient statistics: every checked rank gets `clip_grad` = `clip_factor`
// times the first step's exact grad norm (0: no clipping) and `log_num_zeros`, and, given one,
// the loss scaler `scaler` (grads scaled by the model scaler's scale; a step with inf/NaN skipped
// before any statistic); the schedule's grads carry `injected` on top. After every step the reported grad norm is within
// tol::grad_norm of model::exact_grad_norm (every element of the instance counted once), the
// zero count equals the model's exactly, and every owned piece and its optimizer state equal the
// reference stepped with the grads clipped by the coefficient of the reported norm, bit for bit.
void run_grad_stats_property(const model::CaseSpec& spec, const gen::Schedule& schedule,
                             double clip_factor, bool log_num_zeros,
                             const std::optional<model::GradScalerConfig>& scaler,
                             const std::vector<InjectedGrad>& injected,
                             const sut::Behaviour& behaviour);

// The factory's loss scaler for an fp16 run: dynamic from 2^k (growth 2, backoff 0.5, minimum
// 1, a short window and hysteresis so that growth and backoff both happen), or `--loss-scale`.
rc::Gen<model::GradScalerConfig> factory_scaler();
// Up to `most` grad elements of `c` set to one of `values` at a step of `s`.
rc::Gen<std::vector<InjectedGrad>> injected_grads(const model::CaseSpec& c, const gen::Schedule& s,
                                                  size_t most, std::vector<float> values);

// The found-inf property's draw: a case, a schedule, the factory's loss scaler and up to two
// grad elements set to inf, -inf or NaN.
struct FoundInfDraw {
  model::CaseSpec c;
  gen::Schedule s;
  model::GradScalerConfig scaler;
  std::vector<InjectedGrad> injected;
};
FoundInfDraw draw_found_inf();

// A direct call of `get_grad_norm_fp32`: a group of 1 to 4 ranks, each with 0 to 3 fp32 grads
// (a quarter of the ranks with none) of magnitudes 0 or in [2^-8, 2^8], and the norm type: 2,
// inf, 1 or 3.
rc::Gen<rig::GradNormCall> direct_grad_norm_call();
// Whether some rank of `call` holds no grads.
bool has_rank_without_grads(const rig::GradNormCall& call);
// The claim of StepFlow.DirectGradNormOfEveryTypeEqualsTheModel on `call`: no rank raises, every
// rank returns the same norm, the exact norm of all the grads within the named tolerance.
void run_direct_grad_norm_property(const rig::GradNormCall& call, const sut::Behaviour& b);

}  // namespace sc::props
