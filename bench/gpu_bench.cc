// GPU limits and the accelerator FusedAdam, compiled only where LibTorch has CUDA: pinned and
// pageable H2D and D2H bandwidth (one direction, and both at once on two streams), device-to-
// device copy bandwidth, and the port's multi-tensor FusedAdam kernel over 2^26 fp32 parameters
// (28 B/param) as a fraction of the device copy bandwidth of the same run. Without LibTorch's
// CUDA the benchmarks are not registered; with it but without a device each row stops with
// "no CUDA device", and the JSON's context says there is no accelerator.
#include <chrono>

#include "shardcheck/config.h"

#if SC_TORCH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

#include <atomic>

#include "bench_support.h"
#include "sim/port/behaviour.h"
#include "sim/port/fused_adam.h"
#include "sim/port/torch_pch.h"

namespace {

constexpr int64_t kCopyBytes = int64_t{1} << 30;  // 1 GiB per copy
std::atomic<double> g_d2d{0.0};

// True, with the row marked skipped, where no CUDA device is present.
bool no_device(benchmark::State& state) {
  if (torch::cuda::is_available()) return false;
  state.SkipWithError("no CUDA device: the GPU rows run on a machine with one (scripts/gpu-check)");
  return true;
}

torch::Tensor host_buffer(bool pinned) {
  return torch::empty({kCopyBytes},
                      torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(pinned));
}

torch::Tensor device_buffer() {
  return torch::empty({kCopyBytes},
                      torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA));
}

// direction: 0 H2D, 1 D2H, 2 both at once (two streams); range(1): pinned.
void BM_Limit_HostDeviceCopy(benchmark::State& state) {
  if (no_device(state)) return;
  const int direction = static_cast<int>(state.range(0));
  const bool pinned = state.range(1) != 0;
  torch::Tensor h1 = host_buffer(pinned), h2 = host_buffer(pinned);
  torch::Tensor d1 = device_buffer(), d2 = device_buffer();
  auto s1 = c10::cuda::getStreamFromPool(), s2 = c10::cuda::getStreamFromPool();
  for (auto _ : state) {
    if (direction != 1) {
      c10::cuda::CUDAStreamGuard g(s1);
      d1.copy_(h1, /*non_blocking=*/true);
    }
    if (direction != 0) {
      c10::cuda::CUDAStreamGuard g(s2);
      h2.copy_(d2, /*non_blocking=*/true);
    }
    torch::cuda::synchronize();
  }
  const int64_t bytes = kCopyBytes * (direction == 2 ? 2 : 1);
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Limit_HostDeviceCopy)
    ->ArgNames({"dir_h2d0_d2h1_both2", "pinned"})
    ->ArgsProduct({{0, 1, 2}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_Limit_DeviceCopy(benchmark::State& state) {
  if (no_device(state)) return;
  torch::Tensor a = device_buffer(), b = device_buffer();
  double best = 1e30;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    b.copy_(a);
    torch::cuda::synchronize();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // A copy reads and writes every byte.
  g_d2d.store(2.0 * kCopyBytes / best);
  state.SetBytesProcessed(state.iterations() * 2 * kCopyBytes);
  state.counters["best_GBps"] = 2.0 * kCopyBytes / best / 1e9;
}
BENCHMARK(BM_Limit_DeviceCopy)->UseRealTime()->Unit(benchmark::kMillisecond);

void BM_GpuFusedAdam(benchmark::State& state) {
  if (no_device(state)) return;
  torch::NoGradGuard no_grad;
  const int64_t n = int64_t{1} << 26;
  std::vector<torch::Tensor> params;
  for (int64_t size : sc::bench::realistic_shard_sizes(n)) {
    torch::Tensor p =
        torch::empty({size}, torch::TensorOptions().device(torch::kCUDA)).uniform_(-1, 1);
    p.mutable_grad() = torch::empty_like(p).uniform_(-1e-2, 1e-2);
    params.push_back(p);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(params);
  sc::sut::FusedAdam opt(std::move(groups), sc::sut::FusedAdamOptions().weight_decay(0.01), nullptr,
                         sc::sut::FusedAdamFlags{}, sc::sut::fully_patched());
  opt.step();
  torch::cuda::synchronize();
  for (auto _ : state) {
    opt.step();
    torch::cuda::synchronize();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(sc::bench::kAdamWBytesPerParam * n));
  if (g_d2d.load() > 0) {
    state.counters["frac_of_d2d"] = benchmark::Counter(
        sc::bench::kAdamWBytesPerParam * n * static_cast<double>(state.iterations()) / g_d2d.load(),
        benchmark::Counter::kIsRate);
  }
}
BENCHMARK(BM_GpuFusedAdam)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
#endif  // SC_TORCH_CUDA
