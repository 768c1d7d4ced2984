// The model's fp32 arithmetic against LibTorch: rounding to bf16/fp16, the LibTorch-order AdamW
// emulation (bit-exact under the probed FMA mode, on every ATen CPU capability), and the port's
// FusedAdam kernel against the model's FusedAdam order (bit-exact).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/adamw.h"
#include "model/rounding.h"
#include "sim/rig/fma_probe.h"
#include "sim/rig/rng.h"
#include "sim/port/fused_adam.h"
#include "sim/port/torch_pch.h"

namespace sc {
namespace {

std::vector<float> edge_and_random_floats() {
  std::vector<float> v{0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f,
                       6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.98023259e-08f,
                       1e-45f, 3.0e38f, std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), 1.00390625f, 1.001953125f,
                       1.0009765625f, 0.33333334f};
  rig::SplitMix64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng.next());
    float f;
    std::memcpy(&f, &bits, sizeof f);
    v.push_back(f);
  }
  return v;
}

void expect_same_rounding(torch::ScalarType t, float (*ours)(float)) {
  const std::vector<float> in = edge_and_random_floats();
  torch::Tensor ref = torch::tensor(in).to(t).to(torch::kFloat);
  for (size_t i = 0; i < in.size(); ++i) {
    const float want = ref[static_cast<int64_t>(i)].item<float>();
    const float got = ours(in[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << in[i];
    } else {
      ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0)
          << "input " << in[i] << " want " << want << " got " << got;
    }
  }
}

TEST(Numerics, Bf16RoundingMatchesLibTorch) {
  expect_same_rounding(torch::kBFloat16, model::round_to_bf16);
}

TEST(Numerics, Fp16RoundingMatchesLibTorch) {
  expect_same_rounding(torch::kHalf, model::round_to_fp16);
}

TEST(Numerics, LibTorchAdamWIsReproducedBitForBit) {
  // The probe itself compares 3 steps over 1037 elements; here: several hyper-parameter sets,
  // sizes around vector widths, and the mode it found.
  const auto mode = rig::torch_cpu_fma_mode();
  ASSERT_TRUE(mode) << "neither FMA mode reproduces LibTorch's AdamW on this machine";
  rig::SplitMix64 rng(11);
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000}) {
    for (const model::AdamWHyper& h :
         {model::AdamWHyper{1e-3, 0.9, 0.999, 1e-8, 0.0}, model::AdamWHyper{0.1, 0.5, 0.75, 1e-6, 0.3}}) {
      std::vector<float> p(n);
      for (float& x : p) x = rng.symmetric_unit();
      torch::Tensor t = torch::tensor(p).requires_grad_(true);
      torch::optim::AdamW opt(std::vector<torch::Tensor>{t},
                              torch::optim::AdamWOptions(h.lr).betas({h.beta1, h.beta2}).eps(h.eps)
                                  .weight_decay(h.weight_decay));
      model::AdamWState32 s;
      for (int step = 0; step < 5; ++step) {
        std::vector<float> g(n);
        for (float& x : g) x = rng.symmetric_unit();
        t.mutable_grad() = torch::tensor(g);
        opt.step();
        model::adamw_step_torch(p, g, s, h, *mode, &rig::torch_tensor_sqrt);
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(t[i].item<float>(), p[i]) << "n=" << n << " i=" << i << " lr=" << h.lr;
      }
    }
  }
}

TEST(Numerics, PortFusedAdamKernelEqualsTheModelsFusedOrder) {
  rig::SplitMix64 rng(3);
  for (int64_t n : {1, 7, 8, 9, 100}) {
    std::vector<float> p(n), q, m(n, 0), v(n, 0);
    for (float& x : p) x = rng.symmetric_unit();
    q = p;
    model::AdamWState32 s;
    const model::AdamWHyper h{0.01, 0.9, 0.999, 1e-8, 0.05};
    for (int step = 1; step <= 4; ++step) {
      std::vector<float> g(n);
      for (float& x : g) x = rng.symmetric_unit();
      const float bc1 = sut::te_bias_correction(h.beta1, step);
      const float bc2 = sut::te_bias_correction(h.beta2, step);
      sut::fused_adam_cpu(p.data(), g.data(), m.data(), v.data(), n, 0.01f, 0.9f, 0.999f, 1e-8f,
                          0.05f, bc1, bc2, false);
      model::adamw_step_fused(q, g, s, h, step);
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], q[i]) << "n=" << n << " i=" << i;
  }
}

TEST(Numerics, Fp32EmulationsStayCloseToTheFp64Oracle) {
  // Sanity of the emulations themselves: 8 steps of each stay within 2^-16 relative (plus
  // lr * 2^-16 absolute) of the fp64 oracle on values of order 1.
  rig::SplitMix64 rng(5);
  const int64_t n = 257;
  std::vector<float> a(n), b;
  for (float& x : a) x = rng.symmetric_unit();
  b = a;
  std::vector<double> o(a.begin(), a.end());
  model::AdamWState32 sa, sb;
  model::AdamWState64 so;
  const model::AdamWHyper h{1e-3, 0.9, 0.999, 1e-8, 0.1};
  for (int step = 1; step <= 8; ++step) {
    std::vector<float> g(n);
    for (float& x : g) x = rng.symmetric_unit();
    std::vector<double> gd(g.begin(), g.end());
    model::adamw_step_torch(a, g, sa, h, model::FmaMode::kFused);
    model::adamw_step_fused(b, g, sb, h, step);
    model::adamw_step_fp64(o, gd, so, h);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double tol = std::ldexp(std::fabs(o[i]), -16) + std::ldexp(h.lr, -16);
    EXPECT_NEAR(a[i], o[i], tol) << i;
    EXPECT_NEAR(b[i], o[i], tol) << i;
  }
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The remainder format (TE FusedAdam, store_param_remainders): split then join gives the master
// back bit for bit, and the bf16 half is the model's rule, on edge values, ties and random bits.
TEST(RemainderFormat, SplitJoinIsLosslessAndTheHalfFollowsTheModel) {
  std::vector<float> xs = edge_and_random_floats();
  xs.erase(std::remove_if(xs.begin(), xs.end(), [](float x) { return std::isnan(x); }), xs.end());
  for (uint32_t hi : {0x3F80u, 0x3F81u, 0xBF80u, 0xBF81u, 0x0000u, 0x7F7Fu}) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      xs.push_back(from_bits(hi << 16 | lo));
    }
  }
  rig::SplitMix64 rng(7);
  for (int k = 0; k < 2000; ++k) {
    const float x = from_bits(static_cast<uint32_t>(rng.next()));
    if (!std::isnan(x)) xs.push_back(x);
  }
  const auto n = static_cast<int64_t>(xs.size());
  torch::Tensor master = torch::from_blob(xs.data(), {n}, torch::kFloat).clone();
  torch::Tensor param = torch::zeros({n}, torch::kBFloat16);
  torch::Tensor rem = torch::zeros({n}, torch::kShort);
  sut::split_remainder_master(master, param, rem);
  const torch::Tensor joined = sut::join_remainder_master(param, rem);
  const torch::Tensor half = param.to(torch::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(bits_of(joined[i].item<float>()), bits_of(xs[i])) << "element " << i;
    EXPECT_EQ(bits_of(half[i].item<float>()), bits_of(model::bf16_half_of_split_master(xs[i])))
        << "element " << i << " = " << xs[i];
  }
}

// At an exact tie with an even high half the format rounds up (away from zero), where a cast to
// bf16 rounds to even: precision-aware without offload and the offload path differ by one ulp.
TEST(RemainderFormat, TiesRoundAwayFromZeroNotToEven) {
  const float tie = from_bits(0x3F808000u);  // 1.00390625: between bf16 1.0 and 1.0078125
  EXPECT_EQ(model::bf16_half_of_split_master(tie), 1.0078125f);
  EXPECT_EQ(model::round_to_bf16(tie), 1.0f);
  const float negative_tie = from_bits(0xBF808000u);
  EXPECT_EQ(model::bf16_half_of_split_master(negative_tie), -1.0078125f);
  EXPECT_EQ(model::round_to_bf16(negative_tie), -1.0f);
  // Away from ties both agree.
  EXPECT_EQ(model::bf16_half_of_split_master(from_bits(0x3F807FFFu)), 1.0f);
  EXPECT_EQ(model::bf16_half_of_split_master(from_bits(0x3F808001u)), 1.0078125f);
}

}  // namespace
}  // namespace sc
