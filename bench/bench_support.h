// Shared pieces of the benchmarks: the limits measured in the same run, the stated
// bytes-per-parameter models, a realistic optimizer shard, and a heap high-water mark.
#pragma once

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace sc::bench {

// Bytes per parameter of one fp32 AdamW step, in place, one pass (spec §2, variant A): grad,
// param, exp_avg, exp_avg_sq read (16 B); param, exp_avg, exp_avg_sq written (12 B).
inline constexpr double kAdamWBytesPerParam = 28.0;
// Bytes per element of the triad a[i] = b[i] + s * c[i] as STREAM counts them: two reads and
// one write of fp32 (the write-allocate read of `a` is not counted).
inline constexpr double kTriadBytesPerElement = 12.0;
// Bytes per element of the AdamW-traffic limit: AdamW's own streams, four fp32 read and three
// written back in place (kAdamWBytesPerParam), with trivial arithmetic.
inline constexpr double kAdamWTrafficBytesPerElement = kAdamWBytesPerParam;
// Elements per array of the triad and of the one-tensor AdamW: 2^25 fp32 (128 MiB per array),
// well beyond the caches the machine reports, so both stream from DRAM.
inline constexpr int64_t kStreamElements = int64_t{1} << 25;

// The limits: bytes per second of the best iteration of BM_Limit_HostTriad and of
// BM_Limit_HostAdamWTraffic in this run (they run first); where a filter left one out, it is
// measured here with the same code.
double host_triad_bytes_per_second();
double host_adamw_traffic_bytes_per_second();
void record_triad(double bytes_per_second);
void record_adamw_traffic(double bytes_per_second);

// Runs the triad once over `n` elements per array with all of LibTorch's intra-op threads and
// returns the seconds it took.
double run_triad_once(float* a, const float* b, const float* c, int64_t n, float s);
// Runs AdamW's traffic once over `n` elements per array, in place, with the threads, grain and
// vector width of the fused host AdamW, and returns the seconds it took.
double run_adamw_traffic_once(float* p, const float* g, float* m, float* v, int64_t n);

// One tensor's four AdamW streams, for the limit measured over the same tensors as the rows.
struct AdamWStreams {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
};
// Runs AdamW's traffic once over every element of `tensors` as one run of elements, in tasks of
// the fused host AdamW's grain that cross tensor boundaries as its pass does, on its threads and
// vector width; returns the seconds it took.
double run_adamw_traffic_once(const std::vector<AdamWStreams>& tensors);

// Sets the counters of a benchmark that moved `bytes_per_iteration` in `seconds_per_iteration`:
// its fraction of each limit and the limits themselves, all plain numbers (not rates).
void set_limit_fractions(benchmark::State& state, double bytes_per_iteration,
                         double seconds_per_iteration);

// Seconds of the steady clock since `t0`.
double seconds_since(std::chrono::steady_clock::time_point t0);

// The one-minute load average of the machine (/proc/loadavg), or -1 where it cannot be read.
double load_average_1m();

// Seconds of repeated runs summarised: the median, the best (least) and their ratio (median over
// best: 1.00 on a quiet machine). Empty input: zeros.
struct SampleStats {
  double median = 0, best = 0, spread = 0;
};
SampleStats sample_stats(std::vector<double> seconds);

// The counters of a limit's row from the seconds of each of its iterations: the best
// iteration's bandwidth, the median over the best (1.00 on a quiet machine) and the load.
void set_limit_counters(benchmark::State& state, std::vector<double> seconds,
                        double bytes_per_iteration);

// Element counts of a realistic optimizer shard: DeepSeek-V4-Flash decoder-layer parameters at
// 1/16 size in model order (norms, attention and mHC projections, router, experts: many
// tensors, mixed sizes), taken until `total` elements are reached.
std::vector<int64_t> realistic_shard_sizes(int64_t total);

// Heap bytes live now and the most live since the last reset (every operator new in the
// process is counted; LibTorch's tensor storage, allocated with posix_memalign, is not).
int64_t heap_live_bytes();
int64_t heap_peak_bytes();
void reset_heap_peak();

}  // namespace sc::bench
