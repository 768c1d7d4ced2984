// Layout and shard-plan throughput of the reference model at full parameter sizes.
#include <benchmark/benchmark.h>

#include "model/layout.h"
#include "model/shard.h"
#include "sim/scenario.h"

namespace {

// The model's layout plus every rank's plan for one DeepSeek-V4-Flash pipeline stage at full
// size (scale 1), dp from the argument.
void BM_ModelLayout_Dsv4FlashStage(benchmark::State& state) {
  const auto inventory = sc::sim::build_inventory("dsv4-flash", 1);
  sc::sim::WorldSizes w;
  w.pp = 8;
  w.vpp = 3;
  w.ep = 4;
  w.dp = static_cast<int>(state.range(0));
  w.pipeline_layout = sc::sim::kDsv4FlashLayout;  // 43 layers split no other way over PP 8
  sc::model::CaseSpec c;
  c.params = sc::sim::stage_params(inventory->first, w, inventory->second, 3, 0, 256);
  c.dp = w.dp;
  c.expert_dp = w.dp / w.ep;
  int64_t elements = 0;
  for (const auto& p : c.params) elements += p.numel();
  for (auto _ : state) {
    const auto layouts = sc::model::full_param_layout(c);
    for (int64_t r = 0; r < c.dp; ++r) {
      benchmark::DoNotOptimize(
          sc::model::plan_rank(c, layouts, sc::model::Instance::kDense, r));
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(c.params.size()));
  state.counters["stage_elements"] = static_cast<double>(elements);
}
BENCHMARK(BM_ModelLayout_Dsv4FlashStage)->Arg(4)->Arg(16)->Arg(64);

}  // namespace

BENCHMARK_MAIN();
