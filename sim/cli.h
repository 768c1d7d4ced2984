// The `shardcheck-sim` command line: parsing (total: every bad input is a message, never a
// crash) and the main job, which builds every rank of a world under each chosen variant and
// prints one row per rank.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "sim/scenario.h"

namespace sc::sim {

// Everything the command line chooses.
struct CliOptions {
  std::string model = "dsv4-flash";
  WorldSizes world{8, 3, 4, 4};
  std::vector<std::string> variants{"upstream", "pr6982"};
  bool offload = true;
  double offload_fraction = 1.0;
  bool precision_aware = true;
  std::string device = "auto";  // auto | cpu | cuda
  uint64_t seed = 0;
  int64_t scale = 0;  // 0: 64 in tensor mode, 1 (full size) in layout-only mode
  int steps = 3;       // optimizer steps per rank in tensor mode
  bool layout_only = false;
  bool check_determinism = false;  // run twice, compare the digests of all final states
  bool json = false;
  bool help = false;
};

// The parsed options, or a message naming the offending argument.
std::variant<CliOptions, std::string> parse_cli(const std::vector<std::string>& args);
// The usage text.
std::string cli_usage();
// Runs the main job; returns the process exit status (0 when the job ran, 2 on bad input).
int run_cli(const CliOptions& options, std::ostream& out, std::ostream& err);
// parse_cli + run_cli, printing parse errors to `err` with exit status 2.
int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace sc::sim
