// The real-code implementation of the system-under-test seam (sim/rig/rank_under_test.h): one
// rank of one distributed-optimizer instance of a case, built and stepped by Megatron-Core's own
// Python code in the worker of a tree (sim/rig/megatron_worker.h).
//
// It runs Megatron's factory as the case's `transformer_engine` says: without Transformer Engine
// and Apex (torch.optim.AdamW, or the hybrid optimizer with torch.optim.AdamW on both sides), or
// with TE, whose FusedAdam (the precision-aware optimizer, the hybrid optimizer's accelerator side)
// is then the worker's stand-in (sim/megatron/te_stand_in.py).
// With `check_stream_order` (host stand-in only), the worker records every op of the rank's
// requests with the stream that would run it and answers stream_races() with the accesses CUDA's
// order would leave unordered. Distributed and gathered checkpoints and pageable-copy records are
// not served: those functions throw, so a property that needs them fails loudly, not passes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/spec.h"
#include "sim/rig/megatron_worker.h"
#include "sim/rig/rank_under_test.h"

namespace sc::rig {

// Builds `rank` of `instance` of `spec` from `initial` (per case parameter) in the worker of
// `target`. Construction errors are recorded in construction(), not thrown; the worker's own
// failures throw (megatron_worker.h).
std::unique_ptr<RankUnderTest> make_megatron_rank(const MegatronTarget& target,
                                                  const model::CaseSpec& spec,
                                                  model::Instance instance, int64_t rank,
                                                  const std::vector<std::vector<float>>& initial,
                                                  bool check_stream_order = false,
                                                  bool training_loop = false);

// The same, in `worker`: one real rank of a world (sim/rig/megatron_world.h), whose builds,
// backward passes and steps are collectives that every rank of the world must join.
std::unique_ptr<RankUnderTest> make_megatron_rank(MegatronWorker& worker,
                                                  const model::CaseSpec& spec,
                                                  model::Instance instance, int64_t rank,
                                                  const std::vector<std::vector<float>>& initial,
                                                  bool check_stream_order = false,
                                                  bool training_loop = false);

// Seconds of `steps` more DistributedOptimizer steps of a rank that make_megatron_rank built,
// with the main grads of its last step (the benchmarks): each whole step, the
// HybridDeviceOptimizer's own step within it and its host sub-optimizers' steps (empty without
// the hybrid optimizer), and how many parameters those host sub-optimizers hold. Throws
// std::invalid_argument for a rank of another system under test.
struct MegatronStepTimes {
  std::vector<double> step, hdo, host;
  int64_t host_params = 0, host_optimizers = 0;
};
MegatronStepTimes time_megatron_steps(RankUnderTest& rank, int steps);

// Megatron's `torch`-format checkpoint of the DistributedOptimizer ("dp_zero_gather_scatter"),
// for real ranks only (make_megatron_rank in a world's worker): save_dp_zero keeps the rank's
// model weights and `state_dict()`, and gathers the param state on DP rank 0; load_dp_zero loads
// into a freshly built rank of the same case, as `load_checkpoint` does: the weights, then
// `load_state_dict`, then `load_parameter_state_from_dp_zero`, scattered from DP rank 0. Both are
// collectives, which every rank of the world joins at once (MegatronWorld::on_every_rank); a save
// that raised raises again on load. std::invalid_argument for a rank of another target.
Checkpoint save_dp_zero(RankUnderTest& rank);
void load_dp_zero(RankUnderTest& rank, const Checkpoint& ck);

// Megatron's distributed checkpoint (`torch_dist`) on real ranks: save_sharded writes the rank's
// part of the model's and the optimizer's sharded state dicts, in `sharding_type`
// ("dp_reshardable" or "fully_reshardable", whose save all-gathers over the DP group: every rank
// of the world at once), to its own file in `directory`, a directory the group shares;
// load_sharded resumes a freshly built rank from every file of its group there, as
// `load_checkpoint` does (sim/megatron/dist_checkpoint.py). A save that raised raises again on
// load. std::invalid_argument for a rank of another target.
void save_sharded(RankUnderTest& rank, const std::string& directory,
                  const std::string& sharding_type);
void load_sharded(RankUnderTest& rank, const std::string& directory);

// The build request's "case" object (docs/megatron-worker.md).
nlohmann::json case_request(const model::CaseSpec& spec);

}  // namespace sc::rig
