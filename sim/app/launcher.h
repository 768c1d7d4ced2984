// A local launcher in the manner of torchrun: starts N copies of a program on this machine, one
// per rank, with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set,
// and waits for all of them.
//
// Invariants: every child is reaped before launch_local returns; when one rank fails (non-zero
// exit or a signal), the others that have not exited within a grace period are sent SIGTERM, and
// SIGKILL a grace period later; the timeout sends SIGTERM at once. Children also die with the
// launcher (PR_SET_PDEATHSIG). No LibTorch here.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace sc::app {

// What to start.
struct LaunchSpec {
  std::string program;            // absolute path of the executable
  std::vector<std::string> args;  // argv[1..]
  int processes = 1;              // the world size
  std::string master_addr = "127.0.0.1";
  int master_port = 0;            // 0: pick a free port on master_addr
  double timeout_s = 600;         // the whole run, launch to last exit
  double grace_s = 2;             // first failure to SIGTERM, and SIGTERM to SIGKILL
};

// How one rank ended.
struct RankExit {
  int rank = 0;
  int pid = 0;
  bool signaled = false;            // killed by a signal (`code` is the signal number)
  int code = 0;                     // exit status, or the signal number
  bool stopped_by_launcher = false; // it was still running when the launcher stopped the world
};

// How the world ended.
struct LaunchResult {
  int master_port = 0;
  std::vector<RankExit> ranks;      // indexed by rank; empty when nothing could be started
  bool timed_out = false;
  std::optional<int> first_failure;  // the rank whose failure stopped the others
  std::string error;                 // set when the launcher itself could not start the world
  // True when every rank exited with status 0.
  bool ok() const;
};

// Starts spec.processes ranks and waits for all of them (see the invariants above).
LaunchResult launch_local(const LaunchSpec& spec);
// One line per rank that did not exit 0 ("rank 3: exit status 1", "rank 5: killed by signal 15
// (stopped by the launcher after rank 3 failed)"), plus a timeout line; empty when all passed.
std::vector<std::string> describe_failures(const LaunchResult& result, double timeout_s);

}  // namespace sc::app
