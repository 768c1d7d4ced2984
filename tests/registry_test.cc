// The property registry (properties/registry.h) is the one list of properties: names are
// unique "Suite.Name"s, every property is shown to fail on something (a killer the kill tests
// run, or a check-strength test of this binary), and the table of docs/properties.md is the
// registry's own, word for word, as are the docs' capability table and variant tables.
#include "properties/input_audit.h"
#include "properties/registry.h"
#include "properties/run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace sc::props {
namespace {

// The names of every gtest case linked into this binary ("Suite.Name").
std::set<std::string> tests_of_this_binary() {
  std::set<std::string> out;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      out.insert(std::string(suite.name()) + "." + suite.GetTestInfo(j)->name());
    }
  }
  return out;
}

// Whether docs/recall.json records `property` among what caught the corpus patch `id`.
bool recall_lists_catch(const std::string& id, const std::string& property) {
  std::ifstream in(std::string(SC_SOURCE_DIR) + "/docs/recall.json");
  const nlohmann::json recall = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (recall.is_discarded()) return false;
  for (const nlohmann::json& patch : recall.value("patches", nlohmann::json::array())) {
    if (patch.value("id", "") != id) continue;
    for (const nlohmann::json& catch_ : patch.value("caught_by", nlohmann::json::array())) {
      if (catch_.value("property", "") == property) return true;
    }
  }
  return false;
}

TEST(Registry, NamesAreUniqueSuiteDotNames) {
  std::set<std::string> seen;
  for (const Property& p : all_properties()) {
    EXPECT_TRUE(seen.insert(p.name).second) << p.name << " is registered twice";
    const size_t dot = p.name.find('.');
    EXPECT_TRUE(dot != std::string::npos && dot > 0 && dot + 1 < p.name.size() &&
                p.name.find('.', dot + 1) == std::string::npos)
        << p.name;
    EXPECT_FALSE(p.claim.empty()) << p.name;
    EXPECT_TRUE(p.body) << p.name;
    EXPECT_EQ(find_property(p.name), &p);
  }
  EXPECT_EQ(find_property("ShardBuilderDiff.NoSuchProperty"), nullptr);
}

TEST(Registry, EveryPropertyIsShownToFailOnSomething) {
  const std::set<std::string> tests = tests_of_this_binary();
  for (const Property& p : all_properties()) {
    if (p.target == Target::kModel) {
      EXPECT_FALSE(p.strength_tests.empty()) << p.name << " has no check-strength test";
      for (const std::string& t : p.strength_tests) {
        EXPECT_TRUE(tests.count(t)) << p.name << ": no test " << t << " in this binary";
      }
      continue;
    }
    if (!p.not_on_port.empty()) {
      EXPECT_FALSE(p.history_killers.empty()) << p.name << " names no corpus patch it catches";
      for (const std::string& g : p.history_killers) {
        EXPECT_TRUE(recall_lists_catch(g, p.name))
            << p.name << ": docs/recall.json does not record it catching " << g;
      }
      continue;
    }
    EXPECT_FALSE(p.killers.empty()) << p.name << " names no killer";
    for (const std::string& k : p.killers) {
      EXPECT_TRUE(sut::behaviour_by_name(k)) << p.name << ": no variant or mutant " << k;
    }
    if (p.target == Target::kOwnVariant) {
      EXPECT_TRUE(sut::behaviour_by_name(p.own_variant)) << p.name;
    }
  }
}

// The text of docs/`page` between `<!-- NAME:begin -->` and `<!-- NAME:end -->`, or a failure.
// With SC_UPDATE_DOCS=1 a table that differs is written from the code instead (and the check
// passes): after adding a property, a mutant or an engine, `SC_UPDATE_DOCS=1 ctest -R Registry`
// brings every generated table of docs/ up to date.
::testing::AssertionResult docs_table_is(const std::string& page, const std::string& name,
                                        const std::string& want) {
  const std::string path = std::string(SC_SOURCE_DIR) + "/docs/" + page;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- " + name + ":begin -->\n", end = "<!-- " + name + ":end -->";
  const size_t from = doc.find(begin), to = doc.find(end);
  if (from == std::string::npos || to == std::string::npos) {
    return ::testing::AssertionFailure() << "docs/" << page << " has no " << begin << " ... " << end;
  }
  const size_t first = from + begin.size();
  if (doc.substr(first, to - first) == want) return ::testing::AssertionSuccess();
  const char* update = std::getenv("SC_UPDATE_DOCS");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << doc.substr(0, first) << want << doc.substr(to);
    std::cerr << "docs/" << page << ": " << name << " written from the code\n";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "docs/" << page << "'s " << name
                                       << " differs from the code's (SC_UPDATE_DOCS=1 writes it):\n"
                                       << want;
}

TEST(Registry, TheDocsTableIsTheRegistrys) {
  EXPECT_TRUE(docs_table_is("properties.md", "property-table", property_table_markdown()));
}

// The input audit of docs/properties.md is the generators' declarations (properties/input_audit.h):
// each drawn dimension's draw, 300 inputs with RapidCheck seed 7, produces it at least at its
// stated share; each dimension not drawn says why, in words other than "not yet". Cost: about a
// second (model only; no tensor is built).
TEST(Registry, TheInputAuditIsTheGeneratorsDeclarations) {
  constexpr int kDraws = 300;
  std::map<std::string, double> measured;
  for (const InputDimension& d : input_dimensions()) {
    SCOPED_TRACE(d.dimension);
    if (d.generator.empty()) {
      EXPECT_FALSE(d.why_not.empty());
      EXPECT_EQ(d.why_not.find("not yet"), std::string::npos);
      EXPECT_FALSE(d.sample);
      continue;
    }
    ASSERT_TRUE(d.sample && d.min_rate > 0 && d.why_not.empty());
    int hits = 0;
    RunOptions options;
    options.seed = 7;
    options.max_success = kDraws;
    options.rapidcheck_listener = false;
    const RunOutcome run = run_property([&] { hits += d.sample() ? 1 : 0; }, options);
    ASSERT_EQ(run.kind, RunOutcome::Kind::kPassed) << run.report;
    measured[d.dimension] = static_cast<double>(hits) / kDraws;
    EXPECT_GE(measured[d.dimension], d.min_rate) << d.generator;
  }
  EXPECT_TRUE(docs_table_is("properties.md", "input-audit", input_audit_markdown(measured)));
}

// The capability table of docs/real-megatron.md is the rig's (sim/rig/capabilities.h).
TEST(Registry, TheCapabilityTableIsTheRigs) {
  EXPECT_TRUE(
      docs_table_is("real-megatron.md", "capability-table", rig::capability_table_markdown()));
}

// The tables of docs/variants-and-mutants.md are the deviation table's (sim/port/deviation.h).
TEST(Registry, TheVariantTablesAreTheDeviationTables) {
  const std::string page = "variants-and-mutants.md";
  EXPECT_TRUE(docs_table_is(page, "engine-table", sut::engine_table_markdown()));
  EXPECT_TRUE(docs_table_is(page, "alias-table", sut::alias_table_markdown()));
  EXPECT_TRUE(docs_table_is(page, "mutant-table", mutant_table_markdown()));
}

// Every capability is needed by some property (no row is dead), and a property that needs one
// the real code lacks does not run there, in that capability's words.
TEST(Registry, CapabilitiesDecideWhatRunsAgainstRealCode) {
  for (const rig::CapabilityInfo& c : rig::all_capabilities()) {
    bool needed = false;
    for (const Property& p : all_properties()) {
      if (std::find(p.needs.begin(), p.needs.end(), c.id) == p.needs.end()) continue;
      needed = true;
      if (c.on_real_code || !p.not_on_real_code.empty()) continue;
      EXPECT_FALSE(runs_on_real_code(p)) << p.name << " needs " << c.name;
      EXPECT_NE(why_not_on_real_code(p).find(c.name), std::string::npos) << p.name;
    }
    EXPECT_TRUE(needed) << "no property needs " << c.name;
  }
  const Property* training = find_property("TrainingLoop.EveryParamReceivesItsGradThroughDdp");
  ASSERT_NE(training, nullptr);
  EXPECT_TRUE(runs_on_real_code(*training));
}

}  // namespace
}  // namespace sc::props
