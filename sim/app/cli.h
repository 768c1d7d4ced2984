// The `shardcheck-sim` main job: builds every rank of a world under each chosen variant and
// prints one row per rank (sim/app/options.h parses the command line, sim/app/jobs.h builds the
// cases).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "sim/app/options.h"

namespace sc::app {

// Runs the main job; returns the process exit status (0 when the job ran, 2 on bad input).
int run_cli(const CliOptions& options, std::ostream& out, std::ostream& err);
// parse_cli + run_cli, printing parse errors to `err` with exit status 2.
int cli_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace sc::app
