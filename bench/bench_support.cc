#include "bench_support.h"

#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>

#include "sim/input/scenario.h"

namespace sc::bench {

namespace {

std::atomic<double> g_triad{0.0};

struct Arrays {
  float* p;
  explicit Arrays(int64_t n) : p(static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)))) {}
  ~Arrays() { std::free(p); }
};

}  // namespace

namespace {
// The triad's element loop, compiled for the widest vector unit the CPU has (as the fused AdamW
// kernel is), so that the limit is not understated by a narrow loop.
__attribute__((target_clones("avx512f", "avx2", "default"))) void triad_span(
    float* __restrict a, const float* __restrict b, const float* __restrict c, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}
}  // namespace

double run_triad_once(float* a, const float* b, const float* c, int64_t n, float s) {
  const auto t0 = std::chrono::steady_clock::now();
  at::parallel_for(0, n, int64_t{1} << 16,
                   [&](int64_t lo, int64_t hi) { triad_span(a + lo, b + lo, c + lo, hi - lo, s); });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void record_triad(double bytes_per_second) { g_triad.store(bytes_per_second); }

double host_triad_bytes_per_second() {
  if (g_triad.load() > 0) return g_triad.load();
  const int64_t n = kStreamElements;
  Arrays a(n), b(n), c(n);
  for (int64_t i = 0; i < n; ++i) {
    a.p[i] = 0.0f;
    b.p[i] = 1.0f;
    c.p[i] = 2.0f;
  }
  double best = 1e30;
  for (int r = 0; r < 5; ++r) best = std::min(best, run_triad_once(a.p, b.p, c.p, n, 3.0f));
  g_triad.store(kTriadBytesPerElement * static_cast<double>(n) / best);
  return g_triad.load();
}

void set_fraction_of_triad(benchmark::State& state, double bytes_per_iteration) {
  const double triad = host_triad_bytes_per_second();
  state.counters["triad_GBps"] = triad / 1e9;
  // Bytes per second over the triad's: a rate counter divided by a constant.
  state.counters["frac_of_triad"] =
      benchmark::Counter(bytes_per_iteration * static_cast<double>(state.iterations()) / triad,
                         benchmark::Counter::kIsRate);
}

std::vector<int64_t> realistic_shard_sizes(int64_t total) {
  const auto inventory = sc::sim::build_inventory("dsv4-flash", 16);
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
