// The limits every other figure is divided by, measured in the same run (this file's
// benchmarks are registered first, so they run first).
#include <ATen/Parallel.h>

#include <cstdlib>
#include <memory>

#include "bench_support.h"

namespace sc::bench {
void record_triad(double bytes_per_second);
}  // namespace sc::bench

namespace {

using sc::bench::kStreamElements;
using sc::bench::kTriadBytesPerElement;

// STREAM-triad-like host bandwidth with every intra-op thread of LibTorch (one per core):
// a[i] = b[i] + s * c[i] over three 128 MiB fp32 arrays. The best iteration is the limit.
void BM_Limit_HostTriad(benchmark::State& state) {
  const int64_t n = kStreamElements;
  auto alloc = [n] {
    return std::unique_ptr<float, decltype(&std::free)>(
        static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))), &std::free);
  };
  auto a = alloc(), b = alloc(), c = alloc();
  at::parallel_for(0, n, int64_t{1} << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      a.get()[i] = 0.0f;
      b.get()[i] = 1.0f;
      c.get()[i] = 2.0f;
    }
  });
  double best = 1e30;
  for (auto _ : state) {
    const double s = sc::bench::run_triad_once(a.get(), b.get(), c.get(), n, 3.0f);
    state.SetIterationTime(s);
    best = std::min(best, s);
  }
  const double bytes = kTriadBytesPerElement * static_cast<double>(n);
  sc::bench::record_triad(bytes / best);
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.counters["best_GBps"] = bytes / best / 1e9;
  state.counters["threads"] = at::get_num_threads();
}
BENCHMARK(BM_Limit_HostTriad)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);

}  // namespace
