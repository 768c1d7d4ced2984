#include "sim/port/behaviour.h"

#include <string>
#include <utility>

namespace sc::sut {

namespace {

// The pipelined engine's chunk in the property suite: 4096 elements, so that the generated
// tensors (up to 70,000 elements) split into several and both staging buffers are reused within
// a step.
constexpr int64_t kSuiteChunk = 4096;

// Turns the change of row `r` on or off in `b` (the pipelined engine carries the fused host
// AdamW and its chunk with it).
void apply_change(const DeviationRow& r, Behaviour& b, bool on) {
  b.set(r.flag, on);
  if (r.flag == Deviation::kPipelined) {
    b.set(Deviation::kFusedHostAdamw, on);
    b.pipeline_chunk = on ? kSuiteChunk : 0;
  }
}

// The changes: the table's fix and engine rows.
bool is_change(const DeviationRow& r) { return r.kind != DeviationKind::kMutant; }

// The aliases: `patched`, and the names of earlier releases, when each variant was the one
// before plus one change (an engine's: patched plus that engine).
const std::vector<std::pair<std::string, std::string>>& aliases() {
  static const std::vector<std::pair<std::string, std::string>> kAliases = [] {
    std::vector<std::pair<std::string, std::string>> out{{"patched", patched_changes()}};
    std::string chain;
    for (const DeviationRow& r : deviation_table()) {
      if (r.kind == DeviationKind::kFix) chain += (chain.empty() ? "" : "+") + std::string(r.name);
      if (*r.chain_alias == '\0') continue;
      out.emplace_back(r.chain_alias,
                       r.kind == DeviationKind::kFix ? chain : "patched+" + std::string(r.name));
    }
    return out;
  }();
  return kAliases;
}

// Applies (`on`) or takes out the change, alias or `upstream` called `token` in `b`; false for
// an unknown name.
bool apply_token(std::string_view token, Behaviour& b, bool on, int depth = 0) {
  if (token == "upstream") return on;
  for (const DeviationRow& r : deviation_table()) {
    if (is_change(r) && (token == r.name || (*r.alias != '\0' && token == r.alias))) {
      apply_change(r, b, on);
      return true;
    }
  }
  for (const auto& [alias, expansion] : aliases()) {
    if (token != alias || depth > 2) continue;
    std::string_view rest = expansion;
    while (!rest.empty()) {
      const size_t plus = rest.find('+');
      if (!apply_token(rest.substr(0, plus), b, on, depth + 1)) return false;
      rest = plus == std::string_view::npos ? std::string_view() : rest.substr(plus + 1);
    }
    return true;
  }
  return false;
}

// The longest change, alias or `upstream` that `rest` starts with and that ends there or at a
// '+' or '-' (names hold dashes: "fused-host-adamw", "hdo-accel-grad"); empty when none does.
std::string_view next_name(std::string_view rest) {
  std::string_view best;
  auto consider = [&](std::string_view name) {
    if (rest.substr(0, name.size()) != name || name.size() <= best.size()) return;
    if (rest.size() == name.size() || rest[name.size()] == '+' || rest[name.size()] == '-') {
      best = name;
    }
  };
  consider("upstream");
  for (const DeviationRow& r : deviation_table()) {
    if (!is_change(r)) continue;
    consider(r.name);
    if (*r.alias != '\0') consider(r.alias);
  }
  for (const auto& alias : aliases()) consider(alias.first);
  return best;
}

// `upstream` with the changes and aliases of `name` added after '+' and taken out after '-'
// ("pr6982+F1", "patched-F3"), or nullopt when a part is unknown or empty.
std::optional<Behaviour> composed(std::string_view name) {
  Behaviour b;
  b.name = std::string(name);
  bool on = true;
  std::string_view rest = name;
  while (true) {
    const std::string_view token = next_name(rest);
    if (token.empty() || !apply_token(token, b, on)) return std::nullopt;
    if (token.size() == rest.size()) return b;
    on = rest[token.size()] == '+';
    rest = rest.substr(token.size() + 1);
  }
}

}  // namespace

const std::vector<Behaviour>& all_behaviours() {
  static const std::vector<Behaviour> kAll = [] {
    // upstream, the seed fix, each later fix alone on it, the fully patched variant, then the
    // offload engines on the fully patched variant.
    std::vector<std::string> names{"upstream", "pr6982"};
    for (const DeviationRow& r : deviation_table()) {
      if (r.kind == DeviationKind::kFix && r.flag != Deviation::kPr6982) {
        names.push_back("pr6982+" + std::string(r.name));
      }
    }
    names.push_back("patched");
    for (const DeviationRow& r : deviation_table()) {
      if (r.kind == DeviationKind::kEngine) names.push_back("patched+" + std::string(r.name));
    }
    std::vector<Behaviour> out;
    for (const std::string& name : names) out.push_back(*composed(name));
    return out;
  }();
  return kAll;
}

const std::vector<Behaviour>& all_mutants() {
  static const std::vector<Behaviour> kAll = [] {
    std::vector<Behaviour> out;
    for (const DeviationRow& r : deviation_table()) {
      if (r.kind != DeviationKind::kMutant) continue;
      Behaviour b = *composed(r.base);
      b.name = r.name;
      b.is_mutant = true;
      b.set(r.flag, r.value);
      out.push_back(std::move(b));
    }
    return out;
  }();
  return kAll;
}

std::optional<Behaviour> behaviour_by_name(std::string_view name) {
  for (const Behaviour& b : all_mutants()) {
    if (b.name == name) return b;
  }
  return composed(name);
}

Behaviour upstream() { return all_behaviours().front(); }

Behaviour fully_patched() { return *composed("patched"); }

std::string engine_table_markdown() {
  std::string out = "| option | what |\n| --- | --- |\n";
  for (const DeviationRow& r : deviation_table()) {
    if (r.kind == DeviationKind::kEngine) out += "| `+" + std::string(r.name) + "` | " + r.doc + " |\n";
  }
  return out;
}

std::string alias_table_markdown() {
  std::string out = "| alias | variant |\n| --- | --- |\n";
  for (const auto& [alias, set] : aliases()) {
    if (alias != "patched") out += "| `" + alias + "` | `" + set + "` |\n";
  }
  return out;
}

}  // namespace sc::sut
