// Property throughput: cases per second of each model-versus-port property of the table
// (structural: the shard builder's; numerical: the hybrid optimizer's, FusedAdam's, the
// checkpoint's and the stream simulation's), each run once by RapidCheck at the configured
// number of cases (bench_main.cc sets RC_PARAMS unless it is set); with SC_MEGATRON_TREE (a tree
// with the seed fix, as scripts/bench unpacks) also against real Megatron code.
#include "bench_support.h"

#ifndef SC_NO_PROPERTIES
#include <rapidcheck.h>

#include <iostream>
#include <optional>
#include <sstream>
#include <utility>

#include "properties/registry.h"
#include "properties/run.h"
#include "properties/support.h"
#include "sim/port/behaviour.h"
#endif

namespace sc::bench {

int64_t property_cases();

void register_property_benchmarks() {
#ifndef SC_NO_PROPERTIES
  // The numerical properties also under the faster offload path, to compare the two.
  const std::vector<std::pair<std::string, sut::Behaviour>> variants{
      {"port", sut::fully_patched()},
      {"fused", *sut::behaviour_by_name("patched+fused-host-adamw")},
      {"megatron", sut::fully_patched()}};
  // And against real Megatron code, where SC_MEGATRON_TREE names a tree: the same properties on
  // the other system under test, at the same number of cases.
  const auto tree = props::megatron_tree();
  for (const props::Property* property : props::variant_properties()) {
    const props::Property& def = *property;
    const bool structural = def.name.rfind("ShardBuilder", 0) == 0;
    for (const auto& [tag, b] : variants) {
      if (structural && tag == "fused") continue;
      if (tag == "megatron" && (!tree || !props::runs_on_real_code(def))) continue;
      const std::string name = std::string("BM_PropertyThroughput/") +
                               (structural ? "structural/" : "numerical/") + tag + "/" + def.name;
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&def, b = b, tag = tag, tree](benchmark::State& state) {
                                     std::optional<props::RealCodeScope> real;
                                     if (tag == "megatron") real.emplace(*tree);
                                     bool ok = true;
                                     for (auto _ : state) {
                                       // RapidCheck's report of every run (configuration, classes)
                                       // stays off the console.
                                       std::ostringstream sink;
                                       auto* out = std::cout.rdbuf(sink.rdbuf());
                                       auto* err = std::cerr.rdbuf(sink.rdbuf());
                                       ok = !props::run_property([&] { def.body(b); }).failed() &&
                                            ok;
                                       std::cout.rdbuf(out);
                                       std::cerr.rdbuf(err);
                                       if (!ok) std::cerr << sink.str();
                                     }
                                     if (!ok) state.SkipWithError("the property failed");
                                     state.SetItemsProcessed(state.iterations() * property_cases());
                                     state.counters["cases"] =
                                         static_cast<double>(property_cases());
                                   })
          ->Iterations(1)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
#endif
}

}  // namespace sc::bench
