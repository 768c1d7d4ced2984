// The `shardcheck-sim` command line as data: every option, its parsing (total: every bad input
// is a message naming the argument, never a crash) and the usage text. Standard C++ and the
// model only (no LibTorch), so that a fuzz target links it alone (fuzz/).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "sim/input/scenario.h"

namespace sc::app {

// Everything the command line chooses.
struct CliOptions {
  std::string model = "dsv4-flash";
  std::string model_file;  // a JSON model file (models/README.md) instead of a built-in model
  // The sizes and the pipeline split; world.pipeline_layout "none" turns the model's layout off.
  input::WorldSizes world{8, 3, 4, 4, 1, 0, 0, ""};
  std::vector<std::string> variants{"upstream", "pr6982"};
  bool offload = true;
  double offload_fraction = 1.0;
  // --bucket-size=N: DDP's bucket_size in elements (of the scaled model). As Megatron's training
  // loop sets it, it buckets only pipeline stage 0's first model chunk; nullopt: one bucket per
  // buffer (overlap_grad_reduce off).
  std::optional<int64_t> bucket_size;
  bool precision_aware = true;
  std::string device = "auto";  // auto | cpu | cuda
  uint64_t seed = 0;
  int64_t scale = 0;  // 0: 64 in tensor mode, 1 (full size) in layout-only mode
  int steps = 3;       // optimizer steps per rank in tensor mode
  // --memory-budget=BYTES: tensor mode refuses, before building any tensor, a world one of whose
  // ranks would hold more tensor bytes than this; 0: the default, default_memory_budget().
  int64_t memory_budget = 0;
  bool layout_only = false;
  bool check_determinism = false;  // run twice, compare the digests of all final states
  bool json = false;
  bool stats = false;  // print the wall time, CPU time and peak resident memory of the run
  bool help = false;
  std::string svg;    // --svg=FILE: the picture of the world (sim/picture/picture.h)
  std::string html;   // --html=FILE: the picture and the tables as an HTML report
  bool heat = false;  // --heat: the pictures show each piece's difference from the reference
  // The multi-process mode (sim/app/multiprocess.h).
  int processes = 0;                 // --processes=N: start N local ranks (0: in-process mode)
  bool multi_process = false;        // --multi-process: be one rank (RANK etc. from the env)
  double collective_timeout_s = 60;  // --collective-timeout=S: Gloo's and the store's timeout
  double launch_timeout_s = 600;     // --launch-timeout=S: the local launcher stops the world
  std::string fault;                 // --fault=KIND[@RANK]: a perturbation that tests the checks
  int fault_rank = -1;               // -1: every rank
  std::vector<std::string> args;     // the arguments as given (the launcher passes them on)
};

// The parsed options, or a message naming the offending argument.
std::variant<CliOptions, std::string> parse_cli(const std::vector<std::string>& args);
// The usage text.
std::string cli_usage();
// `args`, a command line parse_cli accepts, without the options in `names` (no dashes; each with
// its value, in either form), every other option as `--name=value` or `--name`.
std::vector<std::string> cli_args_without(const std::vector<std::string>& args,
                                          const std::set<std::string>& names);
// A byte count such as 1048576, 512MiB, 8GiB or 1.5GB (KiB, MiB, GiB, TiB binary; KB, MB, GB, TB
// decimal; B or no suffix: bytes); nullopt unless it is a positive count below 2^62.
std::optional<int64_t> parse_byte_size(const std::string& text);
// "12.3 GiB": a byte count for messages.
std::string format_bytes(int64_t bytes);
// The default of --memory-budget: half the physical memory (8 GiB where it cannot be read).
int64_t default_memory_budget();
}  // namespace sc::app
