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
#include "sim/input/args.h"
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
      "bytes_model",
      "fp32 AdamW 28 B/param (16 read + 12 written); triad 12 B/element (STREAM); AdamW-traffic "
      "limit 28 B/element");
  // What else the machine was doing as the run began: a run on a loaded machine is unfit to
  // quote (scripts/bench-plots says so), whatever its figures.
  benchmark::AddCustomContext("load_average_1m_at_start",
                              std::to_string(sc::bench::load_average_1m()));
  sc::bench::register_property_benchmarks();
  // Google Benchmark reads only `--name=value`; the project's convention takes `--name value`.
  std::vector<std::string> args = sc::input::joined_value_flags(
      std::vector<std::string>(argv, argv + argc), sc::input::kGoogleBenchmarkValueFlags);
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  int count = static_cast<int>(pointers.size());
  pointers.push_back(nullptr);  // argv[argc]: the parsers move entries down to it
  benchmark::Initialize(&count, pointers.data());  // --help prints the usage and exits 0
  if (benchmark::ReportUnrecognizedArguments(count, pointers.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
