// Behaviour sets of the port: upstream Megatron-Core (d8b71082) and named deviations from it.
//
// Every deviation from upstream is one row of the deviation table (sim/port/deviation.h); the
// port consults only `Behaviour::has`, and `upstream` has none on. A variant is upstream plus a
// set of the table's changes joined with '+' (and taken out with '-'): the fixes `pr6982`, `F1`
// ... `F12` (one per finding of FINDINGS.md; `pr5077` names F7's fix as Megatron merged it),
// `pr4547`, and our offload engines `fused-host-adamw` and `pipelined`; `patched` is every fix. So
// `pr6982+F1`, `patched-F3`, `patched+pipelined`. A mutant is the fully patched variant with one
// known bug.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/port/deviation.h"

namespace sc::sut {

// One variant of the port: a set of deviations (sim/port/deviation.h) and its name.
struct Behaviour {
  std::string name;
  // The pipelined offload's chunk in elements when kPipelined is on (0 otherwise). The host part
  // of a step runs as a pipeline over chunks of at most this many elements of each offloaded
  // tensor: the grad chunk copied D2H into one of two pinned staging buffers (in the grad's own
  // dtype), the fused AdamW pass over the chunk while the next chunk's copy runs, and the updated
  // chunk copied H2D (cast on the host into a pinned staging buffer first when the accelerator's
  // parameter is 16-bit, so half the bytes cross the link; the cast rounds as the device's
  // would). No full-size host grad buffers are kept.
  int64_t pipeline_chunk = 0;
  // True for re-injected known bugs, which exist only to be killed by the suite.
  bool is_mutant = false;
  // Which deviations are on.
  std::bitset<kDeviationCount> on;

  bool has(Deviation d) const { return on[static_cast<size_t>(d)]; }
  void set(Deviation d, bool value = true) { on[static_cast<size_t>(d)] = value; }
};

// The variants `--variant=all` runs: upstream, pr6982, each later fix alone on pr6982
// (pr6982+F1, ..., pr6982+pr4547), patched, then patched with each offload engine.
const std::vector<Behaviour>& all_behaviours();
// Every mutant: the fully patched variant with one known bug re-injected (the PIPE mutants:
// patched+pipelined with one wait of its schedule dropped).
const std::vector<Behaviour>& all_mutants();
// The mutant called `name`, or the variant `name` composes ("pr6982+F1", "patched-F3"; the
// names of earlier releases, such as "hdo-accel-grad", are aliases of their sets), or nullopt
// when a part of it is unknown.
std::optional<Behaviour> behaviour_by_name(std::string_view name);
// Megatron-Core at d8b71082 as it is.
Behaviour upstream();
// The fully patched variant: every proposed fix applied.
Behaviour fully_patched();

// The tables of docs/variants-and-mutants.md that the deviation table decides, as Markdown: the
// offload engines (option, what) and the earlier releases' names (alias, variant; `patched` is
// not among them, so a new fix changes no table but its own row). The fixes' table is the source
// of their rows, not derived; the mutants' table needs the properties:
// props::mutant_table_markdown.
std::string engine_table_markdown();
std::string alias_table_markdown();

}  // namespace sc::sut
