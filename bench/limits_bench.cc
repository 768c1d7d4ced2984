// The limits every other figure is divided by, measured in the same run (this file's
// benchmarks are registered first, so they run first). The best iteration of each is the limit;
// its `spread` (median over best) and the load average say whether the run is fit to quote.
#include "sim/engines/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench_support.h"

namespace {

using sc::bench::kStreamElements;

using Array = std::unique_ptr<float, decltype(&std::free)>;

// One 64-byte-aligned fp32 array of kStreamElements, every element `value`, first touched by
// the threads that will stream it.
Array filled(float value) {
  const int64_t n = kStreamElements;
  Array a(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))), &std::free);
  at::parallel_for(0, n, int64_t{1} << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) a.get()[i] = value;
  });
  return a;
}

// Times `once` (which returns its own seconds) every iteration and sets the limit's counters.
template <typename Once>
double run_limit(benchmark::State& state, double bytes_per_element, Once once) {
  const double bytes = bytes_per_element * static_cast<double>(kStreamElements);
  std::vector<double> seconds;
  for (auto _ : state) {
    seconds.push_back(once());
    state.SetIterationTime(seconds.back());
  }
  state.SetItemsProcessed(state.iterations() * kStreamElements);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  sc::bench::set_limit_counters(state, seconds, bytes);
  return bytes / *std::min_element(seconds.begin(), seconds.end());
}

// STREAM-triad-like host bandwidth with every intra-op thread of LibTorch (one per core):
// a[i] = b[i] + s * c[i] over three 128 MiB fp32 arrays.
void BM_Limit_HostTriad(benchmark::State& state) {
  Array a = filled(0.0f), b = filled(1.0f), c = filled(2.0f);
  sc::bench::record_triad(run_limit(state, sc::bench::kTriadBytesPerElement, [&] {
    return sc::bench::run_triad_once(a.get(), b.get(), c.get(), kStreamElements, 3.0f);
  }));
}
BENCHMARK(BM_Limit_HostTriad)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);

// AdamW's exact traffic: four 128 MiB fp32 streams read (param, grad, both moments), three
// written back in place, trivial arithmetic, with the fused host AdamW's threads, grain and
// vector width. An AdamW can approach it, never beat it.
void BM_Limit_HostAdamWTraffic(benchmark::State& state) {
  Array p = filled(1.0f), g = filled(1e-6f), m = filled(0.0f), v = filled(0.0f);
  sc::bench::record_adamw_traffic(run_limit(state, sc::bench::kAdamWTrafficBytesPerElement, [&] {
    return sc::bench::run_adamw_traffic_once(p.get(), g.get(), m.get(), v.get(),
                                             kStreamElements);
  }));
}
BENCHMARK(BM_Limit_HostAdamWTraffic)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);

}  // namespace
