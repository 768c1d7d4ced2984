// The port's full HybridDeviceOptimizer step (grads to the host copies, the accelerator
// FusedAdam, the host AdamW steps, copies back) at offload fractions 0 to 1, overlap on and
// off, bf16 and fp32 models, under the faithful port (torch 2.11's fused AdamW on the
// host, sut::TorchAdamW; sut::fully_patched()), the faster offload path (hdo-fused-host-adamw: the fused host
// AdamW) and the pipelined offload (hdo-pipelined: chunks through staging buffers), side by side.
// Without a GPU the accelerator side is CPU tensors: the label says so.
#include "sim/engines/parallel.h"
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <stdexcept>

#include "bench_support.h"
#include "sim/engines/engines.h"
#include "sim/port/behaviour.h"
#include "sim/port/hybrid_optimizer.h"
#include "sim/port/tensor_attrs.h"
#include "sim/port/torch_pch.h"
#include "sim/rig/megatron_rank.h"

namespace {

using sc::bench::kAdamWBytesPerParam;

// The last component of a path: the tree's name, never the machine's path to it.
std::string fs_name(const std::string& path) {
  const auto slash = path.find_last_of('/', path.size() > 1 ? path.size() - 2 : 0);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (!name.empty() && name.back() == '/') name.pop_back();
  return name;
}

// Parameters per HDO: 2^23 in the realistic shard's mixed sizes.
constexpr int64_t kHdoParams = int64_t{1} << 23;

// Chunk of the pipelined offload here: 2^20 elements, 4 MiB per fp32 staging buffer, large
// enough that a copy runs near the link's bandwidth, small against the 2^23-parameter shard.
constexpr int64_t kPipelineChunk = int64_t{1} << 20;

// Arguments: offload fraction in percent, overlap (0/1), bf16 model (0/1), implementation (0:
// the port, 1: the fused host AdamW, 2: the pipelined offload).
void BM_HdoStep(benchmark::State& state) {
  torch::NoGradGuard no_grad;
  const double fraction = static_cast<double>(state.range(0)) / 100.0;
  const bool overlap = state.range(1) != 0;
  const bool bf16 = state.range(2) != 0;
  const int64_t impl = state.range(3);
  auto behaviour = impl == 0   ? sc::sut::fully_patched()
                   : impl == 1 ? *sc::sut::behaviour_by_name("patched+fused-host-adamw")
                               : *sc::sut::behaviour_by_name("patched+pipelined");
  if (impl == 2) behaviour.pipeline_chunk = kPipelineChunk;
  const bool cuda = torch::cuda::is_available();
  const torch::Device device = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  sc::sut::TensorAttrs attrs;
  std::vector<torch::Tensor> params;
  for (int64_t n : sc::bench::realistic_shard_sizes(kHdoParams)) {
    torch::Tensor p = torch::empty({n}, torch::TensorOptions().device(device))
                          .uniform_(-1, 1)
                          .to(bf16 ? torch::kBFloat16 : torch::kFloat);
    torch::Tensor g =
        torch::empty({n}, torch::TensorOptions().device(device)).uniform_(-1e-2, 1e-2);
    // Precision-aware with a bf16 model: fp32 grads as `decoupled_grad`; fp32: `.grad`.
    if (bf16) {
      attrs.set_decoupled_grad(p, g);
    } else {
      p.mutable_grad() = g;
    }
    params.push_back(p);
  }
  sc::sut::HdoOptions opts;
  opts.lr(1e-3)
      .weight_decay(0.01)
      .offload_fraction(fraction)
      .param_update_in_fp32(true)
      .overlap_cpu_optimizer_d2h_h2d(overlap);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(params);
  sc::sut::HybridDeviceOptimizer hdo(std::move(groups), opts, device, &attrs, behaviour,
                                     /*streams=*/nullptr,
                                     sc::engines::engine_for(behaviour).get());
  int64_t host_params = 0;
  for (const auto& p : params) {
    if (hdo.is_offloaded(p)) host_params += p.numel();
  }
  hdo.step();  // state created outside the timed loop
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    hdo.step();
    if (cuda) torch::cuda::synchronize();
  }
  const double seconds = sc::bench::seconds_since(t0);
  state.SetItemsProcessed(state.iterations() * kHdoParams);
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(kAdamWBytesPerParam * kHdoParams));
  sc::bench::set_limit_fractions(state, kAdamWBytesPerParam * kHdoParams,
                                 seconds / static_cast<double>(state.iterations()));
  state.counters["host_params"] = static_cast<double>(host_params);
  state.counters["host_optimizers"] = static_cast<double>(hdo.num_cpu_optimizers());
  // Host memory the transfers use: full-size host grads (the port, the fused path) or the
  // staging buffers (the pipelined offload, which must have taken every timed step).
  state.counters["host_transfer_MiB"] =
      static_cast<double>(hdo.host_transfer_buffer_bytes()) / (1 << 20);
  if (impl == 2 && host_params > 0 && hdo.engine_host_steps() != state.iterations() + 1) {
    state.SkipWithError("the pipelined offload did not take every step");
  }
  state.SetLabel(std::string(behaviour.name) + (impl == 2 ? " chunk=2^20" : "") +
                 (cuda ? " device=cuda"
                       : " device=cpu-tensors (no GPU: the accelerator side is CPU tensors)"));
}
BENCHMARK(BM_HdoStep)
    ->ArgNames({"fraction_pct", "overlap", "bf16", "impl"})
    ->ArgsProduct({{0, 25, 50, 75, 100}, {0, 1}, {0, 1}, {0, 1, 2}})
    ->MinTime(0.3)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Megatron's own hybrid-optimizer step: a rank of the tree SC_MEGATRON_TREE (scripts/bench
// unpacks the seed's snapshot with the seed fix) built by Megatron's factory through the worker,
// over the same 2^23 parameters of the shard as BM_HdoStep, fp32, DP 1, no Transformer Engine
// (torch.optim.AdamW on both sides, fused=True on the host as the factory sets it), with and
// without overlap_cpu_optimizer_d2h_h2d (with it, one host AdamW per parameter, or per 2^22
// elements under the proposal S1);
// one step makes the state, then kMegatronSteps timed steps (the worker times each call:
// the DistributedOptimizer's step, the HybridDeviceOptimizer's step within it, its host
// sub-optimizers' steps). Its row is the median HDO step; host_frac_of_adamw_limit is the host
// part's 28 B per host parameter over the median host time, against the run's AdamW limit.
constexpr int kMegatronSteps = 10;

sc::model::CaseSpec megatron_shard_case(double fraction, bool overlap) {
  sc::model::CaseSpec spec;
  int k = 0;
  for (int64_t n : sc::bench::realistic_shard_sizes(kHdoParams)) {
    spec.params.push_back({"shard." + std::to_string(k++), {n}, sc::model::DType::kFloat32});
  }
  spec.cpu_offload = true;
  spec.offload_fraction = fraction;
  spec.transformer_engine = false;
  spec.overlap_cpu_optimizer_d2h_h2d = overlap;
  return spec;
}

// fp32 values U(-bound, bound) for every parameter of `spec`, from a fixed seed.
sc::rig::ParamValues uniform_values(const sc::model::CaseSpec& spec, float bound) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-bound, bound);
  sc::rig::ParamValues out;
  for (const auto& p : spec.params) {
    out.emplace_back(p.numel());
    for (float& x : out.back()) x = u(rng);
  }
  return out;
}

double median(std::vector<double> v) { return sc::bench::sample_stats(std::move(v)).median; }

// The tree of row argument `tree`: 0 the seed fix (SC_MEGATRON_TREE), 1 the seed fix with the
// proposal S1, host optimizers of at least 2^22 elements (SC_MEGATRON_PROPOSAL_TREE; FINDINGS.md).
const char* megatron_tree(int64_t which) {
  const char* variable = which == 0 ? "SC_MEGATRON_TREE" : "SC_MEGATRON_PROPOSAL_TREE";
  const char* tree = std::getenv(variable);
  return tree != nullptr && *tree != '\0' ? tree : nullptr;
}

void BM_MegatronHdoStep(benchmark::State& state) {
  const char* tree = megatron_tree(state.range(2));
  if (tree == nullptr) {
    state.SkipWithError(state.range(2) == 0
                            ? "SC_MEGATRON_TREE is not set: scripts/bench unpacks the seed's snapshot"
                            : "SC_MEGATRON_PROPOSAL_TREE is not set: scripts/bench makes it");
    return;
  }
  const auto spec =
      megatron_shard_case(static_cast<double>(state.range(0)) / 100.0, state.range(1) != 0);
  sc::rig::MegatronStepTimes times;
  try {
    auto rank = sc::rig::make_megatron_rank({tree, false}, spec, sc::model::Instance::kDense, 0,
                                            uniform_values(spec, 1.0f));
    if (rank->construction().error) throw std::runtime_error(*rank->construction().error);
    rank->step({uniform_values(spec, 1e-2f), {sc::model::AdamWHyper{1e-3, 0.9, 0.999, 1e-8, 0.01}}});
    times = sc::rig::time_megatron_steps(*rank, kMegatronSteps);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) state.SetIterationTime(median(times.hdo));
  const double host = median(times.host);
  state.counters["step_ms"] = median(times.step) * 1e3;
  state.counters["hdo_ms"] = median(times.hdo) * 1e3;
  state.counters["host_ms"] = host * 1e3;
  state.counters["host_params"] = static_cast<double>(times.host_params);
  state.counters["adamw_limit_GBps"] = sc::bench::host_adamw_traffic_bytes_per_second() / 1e9;
  state.counters["host_frac_of_adamw_limit"] =
      host > 0 ? kAdamWBytesPerParam * static_cast<double>(times.host_params) / host /
                     sc::bench::host_adamw_traffic_bytes_per_second()
               : 0.0;
  state.counters["frac_of_adamw_limit"] = kAdamWBytesPerParam * static_cast<double>(kHdoParams) /
                                          median(times.hdo) /
                                          sc::bench::host_adamw_traffic_bytes_per_second();
  state.counters["host_optimizers"] = static_cast<double>(times.host_optimizers);
  state.counters["loadavg_1m"] = sc::bench::load_average_1m();
  state.SetLabel(std::string("megatron ") + fs_name(tree) +
                 " HybridDeviceOptimizer, torch.optim.AdamW(fused=True) on the host, "
                 "device=cpu-tensors (no GPU: the accelerator side is CPU tensors)");
}
// Every fraction with overlap off and on on the seed fix; the proposal, which changes the
// overlapped path only, with overlap on.
void megatron_hdo_args(benchmark::internal::Benchmark* b) {
  for (int64_t tree : {0, 1}) {
    for (int64_t fraction : {0, 25, 50, 75, 100}) {
      for (int64_t overlap : {0, 1}) {
        if (tree == 0 || overlap == 1) b->Args({fraction, overlap, tree});
      }
    }
  }
}
BENCHMARK(BM_MegatronHdoStep)
    ->ArgNames({"fraction_pct", "overlap", "tree"})
    ->Apply(megatron_hdo_args)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
