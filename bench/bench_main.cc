// The benchmark binary's entry: RapidCheck's case count for the property benchmarks, the
// machine context in the JSON, the property benchmarks registered, then Google Benchmark.
#include <ATen/Parallel.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>
#include <thread>

#include "bench_support.h"
#include "shardcheck/config.h"
#include "sim/port/torch_pch.h"

namespace sc::bench {
void register_property_benchmarks();

// Cases per property run (RC_PARAMS's max_success when it is set there).
int64_t property_cases() {
  const char* env = std::getenv("RC_PARAMS");
  const std::string s = env ? env : "";
  const auto at = s.find("max_success=");
  return at == std::string::npos ? 100 : std::stoll(s.substr(at + 12));
}

// argv with Google Benchmark's value flags given as `--name value` joined into `--name=value`,
// the project's one command-line convention (sim/input/args.h); Google Benchmark reads only
// the joined form.
std::vector<std::string> joined_value_flags(int argc, char** argv) {
  static const std::set<std::string> kValueFlags = {
      "--benchmark_filter",   "--benchmark_min_time",  "--benchmark_repetitions",
      "--benchmark_format",   "--benchmark_out",       "--benchmark_out_format",
      "--benchmark_color",    "--benchmark_time_unit", "--benchmark_context",
      "--benchmark_perf_counters", "--v"};
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (kValueFlags.count(arg) && i + 1 < argc) arg += std::string("=") + argv[++i];
    out.push_back(arg);
  }
  return out;
}
}  // namespace sc::bench

int main(int argc, char** argv) {
  // Few cases per property: a throughput sample, not a verification run (scripts/test is).
  setenv("RC_PARAMS", "max_success=40 seed=1", /*overwrite=*/0);
  // Every core: LibTorch's default can be fewer (one on a two-vCPU guest). SC_BENCH_THREADS
  // overrides it.
  const char* threads = std::getenv("SC_BENCH_THREADS");
  at::set_num_threads(threads ? std::atoi(threads)
                              : static_cast<int>(std::thread::hardware_concurrency()));
  const bool cuda = torch::cuda::is_available();
  benchmark::AddCustomContext("torch_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext(
      "accelerator", cuda ? "cuda" : "none: the HDO's accelerator side runs on CPU tensors");
  benchmark::AddCustomContext(
      "bytes_model", "fp32 AdamW 28 B/param (16 read + 12 written); triad 12 B/element (STREAM)");
  sc::bench::register_property_benchmarks();
  std::vector<std::string> args = sc::bench::joined_value_flags(argc, argv);
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  int count = static_cast<int>(pointers.size());
  benchmark::Initialize(&count, pointers.data());  // --help prints the usage and exits 0
  if (benchmark::ReportUnrecognizedArguments(count, pointers.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
