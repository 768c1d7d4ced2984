// The benchmarks' Python-side AdamW peers (bench/peers/adamw_peers.py) take one step on a fixed
// input, in the peers' environment, and each result is checked against the model's AdamW: torch
// 2.11's single-tensor and foreach loops against the model's single-tensor order and its fused
// kernel against the model's fused order, bit for bit; DeepSpeed's DeepSpeedCPUAdam against the
// fp64 oracle under tol::deepspeed_one_step_*. So a row that is fast in the benchmarks is a row
// that computes AdamW. A known-bad configuration (DeepSpeed with L2 regularisation in place of
// decoupled weight decay) must fail the same check.
//
// Needs SC_PEERS_PYTHON (scripts/test and scripts/bench set it); skipped without it, unless
// SC_REQUIRE_PEERS is set, as scripts/test sets it, where its absence fails.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "model/adamw.h"
#include "sim/rig/fma_probe.h"
#include "sim/rig/tolerances.h"
#include "tests/support/peers_python.h"

namespace {

namespace fs = std::filesystem;
using sc::model::AdamWHyper;

// Sizes with a scalar tail for every vector width (17, 1037 and 100003 are not multiples of 8
// or 16) and a tensor spanning several of DeepSpeed's tiles.
const std::vector<int64_t> kSizes{17, 1037, 100003};
const AdamWHyper kHyper{1e-3, 0.9, 0.999, 1e-8, 0.01};

struct Values {
  std::vector<float> param, exp_avg, exp_avg_sq;
};

class PeerAdamW : public ::testing::Test {
 protected:
  void SetUp() override {
    SC_PEERS_PYTHON_OR_SKIP(python);
    python_ = python;
    char dir[] = "/tmp/shardcheck-peer-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::mt19937 rng(20261203);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f), exponent(-5.0f, -1.0f);
    for (int64_t n : kSizes) {
      for (int64_t i = 0; i < n; ++i) {
        param_.push_back(unit(rng));
        grad_.push_back(unit(rng) * std::pow(10.0f, exponent(rng)));
      }
    }
    write_inputs();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void write_inputs() const {
    std::ofstream sizes(dir_ + "/sizes.txt"), hyper(dir_ + "/hyper.txt");
    for (int64_t n : kSizes) sizes << n << '\n';
    hyper.precision(17);
    hyper << kHyper.lr << ' ' << kHyper.beta1 << ' ' << kHyper.beta2 << ' ' << kHyper.eps << ' '
          << kHyper.weight_decay << '\n';
    write_f32("param.f32", param_);
    write_f32("grad.f32", grad_);
  }
  void write_f32(const std::string& name, const std::vector<float>& v) const {
    std::ofstream f(dir_ + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  }
  std::vector<float> read_f32(const std::string& name) const {
    std::ifstream f(dir_ + "/" + name, std::ios::binary);
    std::vector<float> v(param_.size());
    f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    EXPECT_EQ(f.gcount(), static_cast<std::streamsize>(v.size() * 4)) << name;
    return v;
  }

  // One step of `name` (a peer, or with `mutant` a known-bad configuration) by the harness.
  Values run(const std::string& name, bool mutant = false) const {
    const std::string command = "'" + python_ + "' '" SC_PEERS_HARNESS "' check --" +
                                (mutant ? "mutant " : "peer ") + name + " --dir '" + dir_ + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return {read_f32(name + ".param.f32"), read_f32(name + ".exp_avg.f32"),
            read_f32(name + ".exp_avg_sq.f32")};
  }

  // The model's step of every tensor: `step(param, grad, state)` per tensor.
  template <typename Step>
  Values model(Step step) const {
    Values out;
    int64_t at = 0;
    for (int64_t n : kSizes) {
      std::vector<float> p(param_.begin() + at, param_.begin() + at + n);
      const std::vector<float> g(grad_.begin() + at, grad_.begin() + at + n);
      sc::model::AdamWState32 state{std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f), 0};
      step(p, g, state);
      out.param.insert(out.param.end(), p.begin(), p.end());
      out.exp_avg.insert(out.exp_avg.end(), state.exp_avg.begin(), state.exp_avg.end());
      out.exp_avg_sq.insert(out.exp_avg_sq.end(), state.exp_avg_sq.begin(),
                            state.exp_avg_sq.end());
      at += n;
    }
    return out;
  }

  // Elements of `got` off the DeepSpeed bounds around the fp64 oracle; the first printed.
  int64_t off_deepspeed_bounds(const Values& got) const;

  std::string python_, dir_;
  std::vector<float> param_, grad_;
};

// The first element where `got` and `want` differ in bits, or -1.
int64_t first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

void expect_bit_for_bit(const Values& got, const Values& want, const std::string& peer) {
  for (const auto& [what, g, w] : {std::tuple{"param", &got.param, &want.param},
                                   std::tuple{"exp_avg", &got.exp_avg, &want.exp_avg},
                                   std::tuple{"exp_avg_sq", &got.exp_avg_sq, &want.exp_avg_sq}}) {
    const int64_t i = first_difference(*g, *w);
    EXPECT_EQ(i, -1) << peer << ": " << what << " element " << i << " is "
                     << (i >= 0 ? (*g)[i] : 0.0f) << ", the model's "
                     << (i >= 0 ? (*w)[i] : 0.0f);
  }
}

sc::model::TorchCpuKernels probed_kernels() {
  const std::optional<sc::model::TorchCpuKernels> kernels = sc::rig::torch_cpu_kernels();
  if (!kernels) ADD_FAILURE() << "no emulation reproduces this torch's CPU AdamW kernels";
  return kernels.value_or(sc::model::TorchCpuKernels{});
}

int64_t PeerAdamW::off_deepspeed_bounds(const Values& got) const {
  int64_t off = 0;
  int64_t at = 0;
  double largest = 0;  // the largest difference as a fraction of its bound
  for (int64_t n : kSizes) {
    std::vector<double> p(param_.begin() + at, param_.begin() + at + n);
    const std::vector<double> g(grad_.begin() + at, grad_.begin() + at + n);
    const std::vector<double> before = p;
    sc::model::AdamWState64 state{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0), 0};
    sc::model::adamw_step_fp64(p, g, state, kHyper);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = at + i;
      const double update = p[i] - before[i] * (1 - kHyper.lr * kHyper.weight_decay);
      // Each difference over its bound (a zero bound: only no difference is within it).
      const auto share = [](double difference, double bound) {
        return bound > 0 ? difference / bound : (difference > 0 ? HUGE_VAL : 0.0);
      };
      const double used = std::max(
          {share(std::fabs(got.exp_avg[k] - state.exp_avg[i]),
                 sc::tol::deepspeed_one_step_exp_avg(state.exp_avg[i], kHyper.beta1)),
           share(std::fabs(got.exp_avg_sq[k] - state.exp_avg_sq[i]),
                 sc::tol::deepspeed_one_step_exp_avg_sq(state.exp_avg_sq[i], kHyper.beta2)),
           share(std::fabs(got.param[k] - p[i]),
                 sc::tol::deepspeed_one_step_param(before[i], p[i], update, kHyper.beta2))});
      largest = std::max(largest, used);
      const bool ok = used <= 1.0;
      if (!ok && off++ == 0) {
        ADD_FAILURE() << "element " << k << ": param " << got.param[k] << " (exact " << p[i]
                      << "), exp_avg " << got.exp_avg[k] << " (" << state.exp_avg[i]
                      << "), exp_avg_sq " << got.exp_avg_sq[k] << " (" << state.exp_avg_sq[i]
                      << ")";
      }
    }
    at += n;
  }
  std::printf("largest difference: %.4f of its bound; %lld elements outside\n", largest,
              static_cast<long long>(off));
  return off;
}

TEST_F(PeerAdamW, TorchSingleTensorAndForeachFollowTheModelsSingleTensorOrder) {
  const sc::model::TorchCpuKernels kernels = probed_kernels();
  const Values want = model([&](auto& p, const auto& g, auto& s) {
    sc::model::adamw_step_torch_single(p, g, s, kHyper, kernels);
  });
  expect_bit_for_bit(run("torch-single"), want, "torch-single");
  expect_bit_for_bit(run("torch-foreach"), want, "torch-foreach");
}

TEST_F(PeerAdamW, TorchFusedFollowsTheModelsFusedOrder) {
  const sc::model::TorchCpuKernels kernels = probed_kernels();
  expect_bit_for_bit(run("torch-fused"), model([&](auto& p, const auto& g, auto& s) {
                       sc::model::adamw_step_torch_fused_cpu(p, g, s, kHyper, kernels.fused_width);
                     }),
                     "torch-fused");
}

TEST_F(PeerAdamW, DeepSpeedCpuAdamIsWithinItsOrdersBoundOfTheOracle) {
  EXPECT_EQ(off_deepspeed_bounds(run("deepspeed-cpu-adam")), 0);
}

// The check can fail: DeepSpeed with L2 regularisation (adamw_mode=False) adds wd * p to the
// grad instead of decaying p, and its parameters leave the bounds.
TEST_F(PeerAdamW, DeepSpeedWithL2InsteadOfDecoupledDecayFailsTheCheck) {
  const Values got = run("deepspeed-l2", /*mutant=*/true);
  int64_t off = 0;
  {
    ::testing::TestPartResultArray reported;  // the bounds' own failure reports, kept quiet
    ::testing::ScopedFakeTestPartResultReporter quiet(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &reported);
    off = off_deepspeed_bounds(got);
  }
  EXPECT_GT(off, static_cast<int64_t>(param_.size()) / 2);
}

}  // namespace
