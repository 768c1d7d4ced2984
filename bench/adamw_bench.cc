// CPU AdamW steps: LibTorch's C++ torch::optim::AdamW (the port's host optimizer is torch 2.11's
// fused AdamW, sut::TorchAdamW, since the move to 2.11; these rows predate it) against the fused
// host AdamW of the hdo-fused-host-adamw variant (engines::FusedHostAdamW), over one large tensor
// and over a realistic shard of many mixed-size tensors. Bytes: 28 per parameter (fp32 AdamW),
// as fractions of the host triad and of the AdamW-traffic limit.
#include <ATen/Parallel.h>

#include <chrono>

#include "bench_support.h"
#include "sim/engines/adamw_kernel.h"
#include "sim/engines/fused_host_adamw.h"
#include "sim/port/torch_pch.h"

namespace {

using sc::bench::kAdamWBytesPerParam;

std::vector<torch::Tensor> make_params(const std::vector<int64_t>& sizes) {
  std::vector<torch::Tensor> params;
  for (int64_t n : sizes) {
    torch::Tensor p = torch::empty({n}, torch::kFloat).uniform_(-1, 1);
    p.mutable_grad() = torch::empty({n}, torch::kFloat).uniform_(-1e-2, 1e-2);
    params.push_back(p);
  }
  return params;
}

// kind 0: torch::optim::AdamW; 1: engines::FusedHostAdamW. shard: the realistic shard, else one
// tensor.
template <int kKind, bool kShard>
void BM_CpuAdamW(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  const int64_t total = sc::bench::kStreamElements;
  const std::vector<int64_t> sizes =
      kShard ? sc::bench::realistic_shard_sizes(total) : std::vector<int64_t>{total};
  auto params = make_params(sizes);
  const auto options = torch::optim::AdamWOptions(1e-3).weight_decay(0.01);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (kKind == 0) {
    opt = std::make_unique<torch::optim::AdamW>(params, options);
  } else {
    opt = std::make_unique<sc::engines::FusedHostAdamW>(params, options);
  }
  opt->step();  // state created outside the timed loop
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) opt->step();
  const double seconds = sc::bench::seconds_since(t0);
  if (kKind == 1 && !static_cast<sc::engines::FusedHostAdamW&>(*opt).last_step_was_fused()) {
    state.SkipWithError("the fused AdamW fell back to LibTorch's step");
  }
  state.SetItemsProcessed(state.iterations() * total);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kAdamWBytesPerParam * total));
  sc::bench::set_limit_fractions(state, kAdamWBytesPerParam * total,
                                 seconds / static_cast<double>(state.iterations()));
  state.counters["tensors"] = static_cast<double>(sizes.size());
  state.counters["threads"] = at::get_num_threads();
  if (kKind == 1) state.SetLabel(std::string("isa=") + sc::engines::adamw_kernel_isa());
}
BENCHMARK(BM_CpuAdamW<0, false>)
    ->Name("BM_CpuAdamW/torch/one_tensor")
    ->MinTime(1.0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuAdamW<1, false>)
    ->Name("BM_CpuAdamW/fused/one_tensor")
    ->MinTime(1.0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuAdamW<0, true>)
    ->Name("BM_CpuAdamW/torch/shard")
    ->MinTime(1.0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuAdamW<1, true>)
    ->Name("BM_CpuAdamW/fused/shard")
    ->MinTime(1.0)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
