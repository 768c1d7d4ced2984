// The `shardcheck-sim` command line: parsing (total: every bad input is a message, never a
// crash) and the main job, which builds every rank of a world under each chosen variant and
// prints one row per rank.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "model/reference.h"
#include "model/spec.h"
#include "sim/scenario.h"

namespace sc::sim {

// Everything the command line chooses.
struct CliOptions {
  std::string model = "dsv4-flash";
  std::string model_file;  // a JSON model file (models/README.md) instead of a built-in model
  // The sizes and the pipeline split; world.pipeline_layout "none" turns the model's layout off.
  WorldSizes world{8, 3, 4, 4, 1, 0, 0, ""};
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
  bool stats = false;  // print the wall time, CPU time and peak resident memory of the run
  bool help = false;
  // The multi-process mode (sim/multiprocess.h).
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
// Runs the main job; returns the process exit status (0 when the job ran, 2 on bad input).
int run_cli(const CliOptions& options, std::ostream& out, std::ostream& err);
// The model `options` choose (--model or --model-file) at `scale`, or a message naming the
// problem: an unknown name, or the file and the line or field of a bad model file.
std::variant<ModelInventory, std::string> load_model(const CliOptions& options, int64_t scale);
// The world `o` asks for on `model`, checked: o.world with the model's pipeline layout when no
// split is asked for and the layout has pp * vpp stages; the pipeline split as Megatron makes it;
// EP dividing the experts; TP dividing every dimension it splits at full size. Or the message.
std::variant<WorldSizes, std::string> checked_world(const CliOptions& o,
                                                    const ModelInventory& model);
// parse_cli + run_cli, printing parse errors to `err` with exit status 2.
int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The main job's case for pipeline stage `stage` and EP rank `ep_rank` of `inventory` (TP rank
// 0), in the world o.world (a checked one: checked_world).
model::CaseSpec main_job_case(const CliOptions& o, const std::vector<InventoryParam>& inventory,
                              int num_layers, int num_experts, int stage, int ep_rank);
// The main job's inputs of step k (grads from the seed, the groups' hyper-parameters).
model::StepInputs main_job_step(const model::CaseSpec& c, uint64_t seed, int k);

}  // namespace sc::sim
