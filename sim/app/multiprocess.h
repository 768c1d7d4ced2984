// The multi-process mode of shardcheck-sim: one process per rank over torch.distributed's c10d
// (Gloo on CPU; NCCL only where LibTorch has CUDA), rendezvous through a TCPStore from RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so that torchrun, Slurm or the local launcher can
// start it.
//
// Each rank builds its (stage, DP rank) of the main job's case, reduce-scatters the grad buffers
// of every bucket over its DP group, steps, and all-gathers the param buffers. After every step
// the full parameters of every rank must equal those of its DP group and the in-process mode's,
// bit for bit (an FNV-1a digest of every parameter), and its optimizer state (owned pieces, fp32
// main params, moments: RankRig::digest) that of the same rank in the in-process mode. The
// world is DP x PP with EP 1.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

namespace sc::app {

struct CliOptions;

// Empty when `options` is a valid multi-process run (one variant, EP 1, processes = pp * dp, ...),
// else the message (exit status 2).
std::optional<std::string> check_multi_process_options(const CliOptions& options);

// The FNV-1a digests of the full parameters of every rank after each step of the in-process
// mode ([rank][step]; each stage's DP ranks built and stepped in this process, each parameter
// assembled from the pieces their owners updated), the world resolved once; or the construction
// error of the first rank that fails.
std::variant<std::vector<std::vector<uint64_t>>, std::string> in_process_param_digests(
    const CliOptions& options);
// --processes=N: starts N ranks of this very binary on 127.0.0.1 and waits for them; the exit
// status is 0 when every rank passed, 1 when one failed or the timeout passed, 2 on bad input.
int run_local_launcher(const CliOptions& options, std::ostream& out, std::ostream& err);

// --multi-process: runs one rank (RANK and the rest from the environment); the exit status is 0
// when its checks passed, 1 when a check, a construction or a collective failed, 2 on bad input.
int run_worker(const CliOptions& options, std::ostream& out, std::ostream& err);

}  // namespace sc::app
