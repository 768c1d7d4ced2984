#include "sim/engines/adamw_kernel.h"

#include <algorithm>
#include <cmath>

namespace sc::engines {

AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step) {
  // The same double expressions the fused kernel evaluates, each rounded to float once.
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  AdamWScalars s;
  s.apply_decay = weight_decay != 0;
  s.decay = static_cast<float>(1 - lr * weight_decay);
  s.lerp_weight = static_cast<float>(1 - beta1);
  s.lerp_small = std::fabs(s.lerp_weight) < 0.5f;
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return s;
}

namespace {

// The element loop, in the fused kernel's order: p *= decay; m = lerp(m, g, w) as one FMA;
// v = (1-b2)*g*g + v*b2 as one FMA, whose addend is v*b2 in the vector body and ((1-b2)*g)*g in
// the scalar tail (the wheel's compiler contracts the two differently); d = sqrt(v)/sqrt(bc2) +
// eps; p = p + (-step_size*m)/d. The build compiles with -ffp-contract=off, so only std::fma fuses.
template <bool kTail, bool kDecay>
inline __attribute__((always_inline)) void body(float* __restrict p, const float* __restrict g,
                                                float* __restrict m, float* __restrict v, int64_t n,
                                                const AdamWScalars& s) {
  const float decay = s.decay, w = s.lerp_weight, one_minus_w = 1.0f - s.lerp_weight,
              b2 = s.beta2, a2 = s.one_minus_beta2, sbc2 = s.sqrt_bias_correction2, eps = s.eps,
              step = s.neg_step_size;
  const bool small = s.lerp_small;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float pi = p[i];
    if (kDecay) pi = pi * decay;
    const float diff = gi - m[i];
    const float mi = small ? std::fma(w, diff, m[i]) : std::fma(-diff, one_minus_w, gi);
    const float vi = kTail ? std::fma(v[i], b2, (a2 * gi) * gi) : std::fma(a2 * gi, gi, v[i] * b2);
    const float denom = std::sqrt(vi) / sbc2 + eps;
    const float scaled = step * mi;
    p[i] = pi + scaled / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

template <bool kTail>
inline __attribute__((always_inline)) void body_decay(float* __restrict p,
                                                      const float* __restrict g,
                                                      float* __restrict m, float* __restrict v,
                                                      int64_t n, const AdamWScalars& s) {
  if (s.apply_decay) {
    body<kTail, true>(p, g, m, v, n, s);
  } else {
    body<kTail, false>(p, g, m, v, n, s);
  }
}

// Elements [0, tail_from) in the body's form, the rest in the tail's.
inline __attribute__((always_inline)) void split(float* __restrict p, const float* __restrict g,
                                                 float* __restrict m, float* __restrict v,
                                                 int64_t n, const AdamWScalars& s,
                                                 int64_t tail_from) {
  const int64_t b = std::clamp<int64_t>(tail_from, 0, n);
  body_decay<false>(p, g, m, v, b, s);
  body_decay<true>(p + b, g + b, m + b, v + b, n - b, s);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void span_avx512(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    int64_t n, const AdamWScalars& s, int64_t tail_from) {
  split(p, g, m, v, n, s, tail_from);
}

__attribute__((target("avx2,fma"))) void span_avx2(float* __restrict p, const float* __restrict g,
                                                   float* __restrict m, float* __restrict v,
                                                   int64_t n, const AdamWScalars& s, int64_t tail_from) {
  split(p, g, m, v, n, s, tail_from);
}
#endif

// Without FMA hardware std::fma is a library call: correct, not fast.
void span_baseline(float* __restrict p, const float* __restrict g, float* __restrict m,
                   float* __restrict v, int64_t n, const AdamWScalars& s, int64_t tail_from) {
  split(p, g, m, v, n, s, tail_from);
}

using SpanFn = void (*)(float* __restrict, const float* __restrict, float* __restrict,
                        float* __restrict, int64_t, const AdamWScalars&, int64_t);

struct Dispatch {
  SpanFn fn;
  const char* isa;
};

Dispatch pick() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
    return {span_avx512, "avx512"};
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return {span_avx2, "avx2"};
  }
#endif
  return {span_baseline, "baseline"};
}

const Dispatch& dispatch() {
  static const Dispatch kDispatch = pick();
  return kDispatch;
}

}  // namespace

void adamw_step_span(float* __restrict param, const float* __restrict grad,
                     float* __restrict exp_avg, float* __restrict exp_avg_sq, int64_t count,
                     const AdamWScalars& scalars, int64_t tail_from) {
  if (count <= 0) return;
  dispatch().fn(param, grad, exp_avg, exp_avg_sq, count, scalars, tail_from);
}

const char* adamw_kernel_isa() { return dispatch().isa; }

}  // namespace sc::engines
