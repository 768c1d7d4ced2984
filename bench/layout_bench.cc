// Layout and shard-plan throughput of the reference model at full parameter sizes.
#include <benchmark/benchmark.h>

#include <chrono>

#include "bench_support.h"
#include "model/layout.h"
#include "model/shard.h"
#include "sim/input/scenario.h"

namespace {

// The model's layout plus every rank's plan for one DeepSeek-V4-Flash pipeline stage at full
// size (scale 1), dp from the argument.
void BM_ModelLayout_Dsv4FlashStage(benchmark::State& state) {
  const auto inventory = sc::input::build_inventory("dsv4-flash", 1);
  sc::input::WorldSizes w;
  w.pp = 8;
  w.vpp = 3;
  w.ep = 4;
  w.dp = static_cast<int>(state.range(0));
  w.pipeline_layout = sc::input::kDsv4FlashLayout;  // 43 layers split no other way over PP 8
  sc::model::CaseSpec c;
  c.params = sc::input::stage_params(inventory->first, w, inventory->second, 3, 0, 256);
  c.dp = w.dp;
  c.expert_dp = w.dp / w.ep;
  int64_t elements = 0;
  for (const auto& p : c.params) elements += p.numel();
  for (auto _ : state) {
    const auto layouts = sc::model::full_param_layout(c);
    for (int64_t r = 0; r < c.dp; ++r) {
      benchmark::DoNotOptimize(sc::model::plan_rank(c, layouts, sc::model::Instance::kDense, r));
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(c.params.size()));
  state.counters["stage_elements"] = static_cast<double>(elements);
}
BENCHMARK(BM_ModelLayout_Dsv4FlashStage)->Arg(4)->Arg(16)->Arg(64);

// The whole DeepSeek-V4-Flash world at full size, layout only (no tensors): every pipeline stage
// and expert-parallel rank (PP 8, VPP 3, EP 4, DP from the argument), each with its layout and
// the plan of every DP rank of both instances. Peak heap: the most live at once.
void BM_ModelLayout_Dsv4FlashWorld(benchmark::State& state) {
  const auto inventory = sc::input::build_inventory("dsv4-flash", 1);
  sc::input::WorldSizes w;
  w.pp = 8;
  w.vpp = 3;
  w.ep = 4;
  w.dp = static_cast<int>(state.range(0));
  w.pipeline_layout = sc::input::kDsv4FlashLayout;
  int64_t params = 0, elements = 0;
  const int64_t live0 = sc::bench::heap_live_bytes();
  sc::bench::reset_heap_peak();
  for (auto _ : state) {
    params = elements = 0;
    for (int stage = 0; stage < w.pp; ++stage) {
      for (int ep_rank = 0; ep_rank < w.ep; ++ep_rank) {
        sc::model::CaseSpec c;
        c.params =
            sc::input::stage_params(inventory->first, w, inventory->second, stage, ep_rank, 256);
        c.dp = w.dp;
        c.expert_dp = w.dp / w.ep;
        for (const auto& p : c.params) elements += p.numel();
        params += static_cast<int64_t>(c.params.size());
        const auto layouts = sc::model::full_param_layout(c);
        for (auto inst : {sc::model::Instance::kDense, sc::model::Instance::kExpert}) {
          for (int64_t r = 0; r < sc::model::instance_dp(c, inst); ++r) {
            benchmark::DoNotOptimize(sc::model::plan_rank(c, layouts, inst, r));
          }
        }
      }
    }
  }
  state.SetItemsProcessed(state.iterations() * params);
  state.counters["world_params"] = static_cast<double>(params);
  state.counters["world_elements"] = static_cast<double>(elements);
  state.counters["peak_heap_bytes"] = static_cast<double>(sc::bench::heap_peak_bytes() - live0);
}
BENCHMARK(BM_ModelLayout_Dsv4FlashWorld)->Arg(4)->Arg(16)->Unit(benchmark::kMillisecond);

// A synthetic inventory of `n` parameters: a repeating layer of a norm, four attention-sized
// matrices, a router and eight experts (bf16, one fp32 router per layer), one bucket per 40M
// elements (Megatron's default bucket size at these DP sizes).
sc::model::CaseSpec synthetic_case(int64_t n, int dp) {
  sc::model::CaseSpec c;
  c.dp = dp;
  c.expert_dp = dp;
  c.bucket_size = 40'000'000;
  const std::vector<std::vector<int64_t>> shapes{{4096},      {1024, 4096}, {4096, 512},
                                                 {512, 4096}, {4096, 1024}, {256, 4096}};
  c.params.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    sc::model::ParamSpec p;
    const int64_t k = i % 14;
    p.name = "p" + std::to_string(i);
    if (k < 6) {
      p.shape = shapes[static_cast<size_t>(k)];
      p.dtype = k == 5 ? sc::model::DType::kFloat32 : sc::model::DType::kBFloat16;
      p.group = k == 0 ? 1 : 0;
    } else {
      p.shape = {2048, 512};
      p.dtype = sc::model::DType::kBFloat16;
      p.is_expert = true;
    }
    c.params.push_back(std::move(p));
  }
  return c;
}

// Building the layout and one rank's shard plan of an `n`-parameter inventory (what each DP
// rank does at construction) at DP `dp`: time and peak heap per parameter, to show how each
// grows with the parameter count (buckets grow with it too) and with DP.
void BM_ShardBuild_Synthetic(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int dp = static_cast<int>(state.range(1));
  const sc::model::CaseSpec c = synthetic_case(n, dp);
  const int64_t live0 = sc::bench::heap_live_bytes();
  sc::bench::reset_heap_peak();
  for (auto _ : state) {
    const auto layouts = sc::model::full_param_layout(c);
    benchmark::DoNotOptimize(sc::model::plan_rank(c, layouts, sc::model::Instance::kDense, dp / 3));
    benchmark::DoNotOptimize(
        sc::model::plan_rank(c, layouts, sc::model::Instance::kExpert, dp / 3));
  }
  const double peak = static_cast<double>(sc::bench::heap_peak_bytes() - live0);
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["params"] = static_cast<double>(n);
  state.counters["dp"] = dp;
  state.counters["peak_heap_bytes"] = peak;
  state.counters["peak_heap_bytes_per_param"] = peak / static_cast<double>(n);
}
BENCHMARK(BM_ShardBuild_Synthetic)
    ->ArgNames({"params", "dp"})
    ->Args({10'000, 64})
    ->Args({100'000, 64})
    ->Args({1'000'000, 64})
    ->Args({100'000, 8})
    ->Args({100'000, 512})
    ->Args({100'000, 4096})
    ->Unit(benchmark::kMillisecond);

}  // namespace
