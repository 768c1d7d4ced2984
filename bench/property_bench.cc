// Property throughput: cases per second of each model-versus-port property of the table
// (structural: the shard builder's; numerical: the hybrid optimizer's, FusedAdam's, the
// checkpoint's and the stream simulation's), each run once by RapidCheck at the configured
// number of cases (bench_main.cc sets RC_PARAMS unless it is set); with SC_MEGATRON_TREE (a tree
// with the seed fix, as scripts/bench unpacks) also against real Megatron code (on
// SC_MEGATRON_FIXED_TREE, the tree with every fix, where set), and the properties that run the
// port and the real code side by side.
#include "bench_support.h"

#ifndef SC_NO_PROPERTIES
#include <rapidcheck.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "properties/registry.h"
#include "properties/run.h"
#include "properties/support.h"
#include "sim/port/behaviour.h"
#endif

namespace sc::bench {

int64_t property_cases();

#ifndef SC_NO_PROPERTIES
namespace {

// One RapidCheck run of `def` under `b` at the configured number of cases, against real code
// from `tree` where given.
void run_property_once(benchmark::State& state, const props::Property& def, const sut::Behaviour& b,
                       const std::optional<rig::MegatronTarget>& tree) {
  std::optional<props::RealCodeScope> real;
  if (tree) real.emplace(*tree);
  bool ok = true;
  for (auto _ : state) {
    // RapidCheck's report of every run (configuration, classes) stays off the console.
    std::ostringstream sink;
    auto* out = std::cout.rdbuf(sink.rdbuf());
    auto* err = std::cerr.rdbuf(sink.rdbuf());
    ok = !props::run_property([&] { def.body(b); }).failed() && ok;
    std::cout.rdbuf(out);
    std::cerr.rdbuf(err);
    if (!ok) std::cerr << sink.str();
  }
  if (!ok) state.SkipWithError("the property failed");
  state.SetItemsProcessed(state.iterations() * property_cases());
  state.counters["cases"] = static_cast<double>(property_cases());
}

void register_once(const std::string& name, std::function<void(benchmark::State&)> body) {
  benchmark::RegisterBenchmark(name.c_str(), std::move(body))
      ->Iterations(1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace
#endif

void register_property_benchmarks() {
#ifndef SC_NO_PROPERTIES
  // The numerical properties also under the faster offload path, to compare the two.
  const std::vector<std::pair<std::string, sut::Behaviour>> variants{
      {"port", sut::fully_patched()},
      {"fused", *sut::behaviour_by_name("patched+fused-host-adamw")},
      {"megatron", sut::fully_patched()}};
  // And against real Megatron code, where SC_MEGATRON_TREE names a tree: the same properties on
  // the other system under test, at the same number of cases, on the tree with every finding's
  // fix where SC_MEGATRON_FIXED_TREE names one (against the seed fix alone the properties fail
  // on the findings, and a failed run times nothing).
  const auto tree = props::megatron_tree();
  const char* fixed = std::getenv("SC_MEGATRON_FIXED_TREE");
  const auto fixed_tree =
      fixed != nullptr && *fixed != '\0'
          ? std::optional<rig::MegatronTarget>(rig::MegatronTarget{fixed, false})
          : tree;
  for (const props::Property* property : props::variant_properties()) {
    const props::Property& def = *property;
    const bool structural = def.name.rfind("ShardBuilder", 0) == 0;
    for (const auto& [tag, b] : variants) {
      if (structural && tag == "fused") continue;
      if (tag == "megatron" && (!tree || !props::runs_on_real_code(def))) continue;
      const std::string name = std::string("BM_PropertyThroughput/") +
                               (structural ? "structural/" : "numerical/") + tag + "/" + def.name;
      const auto real = tag == "megatron" ? fixed_tree : std::nullopt;
      register_once(name, [&def, b = b, real](benchmark::State& state) {
        run_property_once(state, def, b, real);
      });
    }
  }
  if (!tree) return;
  // The properties that run the port and the real code side by side (one process, or one
  // worker per DP rank beside the one-process emulation and the port): on the tree with every
  // fix under `patched` where SC_MEGATRON_FIXED_TREE names it (the torch-format resume fails on
  // F8 and F9 with the seed fix alone), else on the seed fix under `pr6982`. They read their
  // tree from SC_MEGATRON_TREE, set for the run.
  const bool every_fix = fixed != nullptr && *fixed != '\0';
  const std::string pair_tree = every_fix ? fixed : tree->tree;
  const sut::Behaviour pair_variant = *sut::behaviour_by_name(every_fix ? "patched" : "pr6982");
  for (const props::Property& def : props::all_properties()) {
    if (def.target != props::Target::kPortVsRealCode) continue;
    register_once("BM_PropertyThroughput/numerical/pair/" + def.name,
                  [&def, pair_tree, pair_variant, seed_fix = tree->tree](benchmark::State& state) {
                    setenv("SC_MEGATRON_TREE", pair_tree.c_str(), 1);
                    run_property_once(state, def, pair_variant, std::nullopt);
                    setenv("SC_MEGATRON_TREE", seed_fix.c_str(), 1);
                  });
  }
#endif
}

}  // namespace sc::bench
