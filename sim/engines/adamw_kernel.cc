#include "sim/engines/adamw_kernel.h"

#include <cmath>

namespace sc::engines {

AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step) {
  // The same double expressions LibTorch's AdamW::step evaluates before its kernels see them.
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  AdamWScalars s;
  s.apply_decay = weight_decay != 0;
  s.decay = static_cast<float>(1 - lr * weight_decay);
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return s;
}

namespace {

// The element loop. Each line is one LibTorch tensor op of AdamW::step, in its order:
//   p.mul_(decay); m.mul_(b1).add_(g, 1-b1); v.mul_(b2).addcmul_(g, g, 1-b2);
//   denom = (v.sqrt() / sqrt(bc2)).add_(eps); p.addcdiv_(m, denom, -step_size).
// The build compiles with -ffp-contract=off, so only std::fma fuses.
template <bool kFma, bool kDecay>
inline __attribute__((always_inline)) void body(float* __restrict p, const float* __restrict g,
                                                float* __restrict m, float* __restrict v, int64_t n,
                                                const AdamWScalars& s) {
  const float decay = s.decay, b1 = s.beta1, a1 = s.one_minus_beta1, b2 = s.beta2,
              a2 = s.one_minus_beta2, sbc2 = s.sqrt_bias_correction2, eps = s.eps,
              step = s.neg_step_size;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float pi = p[i];
    if (kDecay) pi = pi * decay;
    float mi = m[i] * b1;
    mi = kFma ? std::fma(a1, gi, mi) : mi + a1 * gi;
    float vi = v[i] * b2;
    const float ag = a2 * gi;
    vi = kFma ? std::fma(ag, gi, vi) : vi + ag * gi;
    const float denom = std::sqrt(vi) / sbc2 + eps;
    const float scaled = step * mi;
    p[i] = pi + scaled / denom;
    m[i] = mi;
    v[i] = vi;
  }
}

template <bool kFma>
inline __attribute__((always_inline)) void body_decay(float* __restrict p,
                                                      const float* __restrict g,
                                                      float* __restrict m, float* __restrict v,
                                                      int64_t n, const AdamWScalars& s) {
  if (s.apply_decay) {
    body<kFma, true>(p, g, m, v, n, s);
  } else {
    body<kFma, false>(p, g, m, v, n, s);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void span_avx512(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    int64_t n, const AdamWScalars& s, bool fma) {
  if (fma) {
    body_decay<true>(p, g, m, v, n, s);
  } else {
    body_decay<false>(p, g, m, v, n, s);
  }
}

__attribute__((target("avx2,fma"))) void span_avx2(float* __restrict p, const float* __restrict g,
                                                   float* __restrict m, float* __restrict v,
                                                   int64_t n, const AdamWScalars& s, bool fma) {
  if (fma) {
    body_decay<true>(p, g, m, v, n, s);
  } else {
    body_decay<false>(p, g, m, v, n, s);
  }
}
#endif

// Without FMA hardware std::fma is a library call: correct, not fast.
void span_baseline(float* __restrict p, const float* __restrict g, float* __restrict m,
                   float* __restrict v, int64_t n, const AdamWScalars& s, bool fma) {
  if (fma) {
    body_decay<true>(p, g, m, v, n, s);
  } else {
    body_decay<false>(p, g, m, v, n, s);
  }
}

using SpanFn = void (*)(float* __restrict, const float* __restrict, float* __restrict,
                        float* __restrict, int64_t, const AdamWScalars&, bool);

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
                     const AdamWScalars& scalars, bool fused_multiply_add) {
  if (count <= 0) return;
  dispatch().fn(param, grad, exp_avg, exp_avg_sq, count, scalars, fused_multiply_add);
}

const char* adamw_kernel_isa() { return dispatch().isa; }

}  // namespace sc::engines
