// Shared pieces of the benchmarks: the limits measured in the same run, the stated
// bytes-per-parameter models, a realistic optimizer shard, and a heap high-water mark.
#pragma once

#include <benchmark/benchmark.h>

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
// Elements per array of the triad and of the one-tensor AdamW: 2^25 fp32 (128 MiB per array),
// well beyond the caches the machine reports, so both stream from DRAM.
inline constexpr int64_t kStreamElements = int64_t{1} << 25;

// The host triad bandwidth in bytes per second measured by BM_Limit_HostTriad in this run (it
// runs first); if it has not run (a filter left it out), measured here with the same code.
double host_triad_bytes_per_second();
// Runs the triad once over `n` elements per array with all of LibTorch's intra-op threads and
// returns the seconds it took.
double run_triad_once(float* a, const float* b, const float* c, int64_t n, float s);

// Sets the fraction-of-limit counters of a benchmark that moved `bytes_per_iteration`.
void set_fraction_of_triad(benchmark::State& state, double bytes_per_iteration);

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
