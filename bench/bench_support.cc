#include "bench_support.h"

#include "sim/engines/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>

#include "sim/engines/adamw_kernel.h"
#include "sim/engines/pieces.h"
#include "sim/input/scenario.h"

namespace sc::bench {

namespace {

std::atomic<double> g_triad{0.0};
std::atomic<double> g_adamw_traffic{0.0};

struct Arrays {
  float* p;
  Arrays(int64_t n, float value)
      : p(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)))) {
    std::fill(p, p + n, value);
  }
  ~Arrays() { std::free(p); }
};

// The triad's element loop, compiled for the widest vector unit the CPU has (as the fused AdamW
// kernel is), so that the limit is not understated by a narrow loop.
__attribute__((target_clones("avx512f", "avx2", "default"))) void triad_span(
    float* __restrict a, const float* __restrict b, const float* __restrict c, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

// AdamW's streams with next to no arithmetic: param, grad and both moments read, param and both
// moments written in place, as the fused AdamW kernel moves them.
__attribute__((target_clones("avx512f", "avx2", "default"))) void adamw_traffic_span(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] + gi;
    const float vi = v[i] + gi;
    p[i] = p[i] - mi;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double run_triad_once(float* a, const float* b, const float* c, int64_t n, float s) {
  const auto t0 = std::chrono::steady_clock::now();
  at::parallel_for(0, n, int64_t{1} << 16,
                   [&](int64_t lo, int64_t hi) { triad_span(a + lo, b + lo, c + lo, hi - lo, s); });
  return seconds_since(t0);
}

double run_adamw_traffic_once(float* p, const float* g, float* m, float* v, int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  at::parallel_for(0, n, engines::kAdamWParallelGrain, [&](int64_t lo, int64_t hi) {
    adamw_traffic_span(p + lo, g + lo, m + lo, v + lo, hi - lo);
  });
  return seconds_since(t0);
}

double run_adamw_traffic_once(const std::vector<AdamWStreams>& tensors) {
  std::vector<int64_t> ends;
  int64_t total = 0;
  for (const AdamWStreams& t : tensors) ends.push_back(total += t.n);
  const auto t0 = std::chrono::steady_clock::now();
  at::parallel_for(0, total, engines::kAdamWParallelGrain, [&](int64_t begin, int64_t end) {
    engines::for_each_piece(ends, begin, end, [&](size_t k, int64_t lo, int64_t hi) {
      const AdamWStreams& t = tensors[k];
      adamw_traffic_span(t.p + lo, t.g + lo, t.m + lo, t.v + lo, hi - lo);
    });
  });
  return seconds_since(t0);
}

void record_triad(double bytes_per_second) { g_triad.store(bytes_per_second); }
void record_adamw_traffic(double bytes_per_second) { g_adamw_traffic.store(bytes_per_second); }

double host_triad_bytes_per_second() {
  if (g_triad.load() > 0) return g_triad.load();
  const int64_t n = kStreamElements;
  Arrays a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) best = std::min(best, run_triad_once(a.p, b.p, c.p, n, 3.0f));
  record_triad(kTriadBytesPerElement * static_cast<double>(n) / best);
  return g_triad.load();
}

double host_adamw_traffic_bytes_per_second() {
  if (g_adamw_traffic.load() > 0) return g_adamw_traffic.load();
  const int64_t n = kStreamElements;
  Arrays p(n, 1.0f), g(n, 1e-6f), m(n, 0.0f), v(n, 0.0f);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) best = std::min(best, run_adamw_traffic_once(p.p, g.p, m.p, v.p, n));
  record_adamw_traffic(kAdamWTrafficBytesPerElement * static_cast<double>(n) / best);
  return g_adamw_traffic.load();
}

void set_limit_fractions(benchmark::State& state, double bytes_per_iteration,
                         double seconds_per_iteration) {
  const double triad = host_triad_bytes_per_second();
  const double traffic = host_adamw_traffic_bytes_per_second();
  const double rate = bytes_per_iteration / seconds_per_iteration;
  state.counters["triad_GBps"] = triad / 1e9;
  state.counters["adamw_limit_GBps"] = traffic / 1e9;
  state.counters["frac_of_triad"] = rate / triad;
  state.counters["frac_of_adamw_limit"] = rate / traffic;
  state.counters["loadavg_1m"] = load_average_1m();
}

double load_average_1m() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  return in >> one ? one : -1;
}

SampleStats sample_stats(std::vector<double> seconds) {
  if (seconds.empty()) return {};
  std::sort(seconds.begin(), seconds.end());
  const double best = seconds.front(), median = seconds[seconds.size() / 2];
  return {median, best, median / best};
}

void set_limit_counters(benchmark::State& state, std::vector<double> seconds,
                        double bytes_per_iteration) {
  const SampleStats s = sample_stats(std::move(seconds));
  state.counters["best_GBps"] = bytes_per_iteration / s.best / 1e9;
  state.counters["spread"] = s.spread;
  state.counters["loadavg_1m"] = load_average_1m();
  state.counters["threads"] = at::get_num_threads();
}

std::vector<int64_t> realistic_shard_sizes(int64_t total) {
  const auto inventory = sc::input::build_inventory("dsv4-flash", 16);
  std::vector<int64_t> out;
  int64_t sum = 0;
  while (sum < total) {
    for (const auto& p : inventory->first) {
      if (p.layer < 0) continue;  // decoder layers only: no embedding or output layer
      const int64_t n = std::min(p.spec.numel(), total - sum);
      out.push_back(n);
      sum += n;
      if (sum >= total) break;
    }
  }
  return out;
}

}  // namespace sc::bench

// The heap high-water mark: every operator new of the process goes through here.
namespace {
std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n + 16);
  if (!p) throw std::bad_alloc();
  *static_cast<std::size_t*>(p) = n;
  const int64_t live = g_live.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + 16;
}

void counted_free(void* q) {
  if (!q) return;
  void* p = static_cast<char*>(q) - 16;
  g_live.fetch_sub(static_cast<int64_t>(*static_cast<std::size_t*>(p)));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

namespace sc::bench {
int64_t heap_live_bytes() { return g_live.load(); }
int64_t heap_peak_bytes() { return g_peak.load(); }
void reset_heap_peak() { g_peak.store(g_live.load()); }
}  // namespace sc::bench
