// Real ranks of the real code: one Megatron worker process per data-parallel rank, joined by
// torch.distributed over Gloo on 127.0.0.1 (sim/megatron/world.py). A rank built in such a worker
// (make_megatron_rank with its worker) runs Megatron's own DistributedDataParallel and
// DistributedOptimizer end to end: the backward pass reduce-scatters the grad buckets, the step
// all-gathers the parameters. Those requests are collectives, so they go to every rank at once
// (on_every_rank); nothing of the other ranks is simulated.
//
// Never a hang: a rendezvous or collective waits at most SC_MEGATRON_COLLECTIVE_TIMEOUT seconds
// (default 60) for the other ranks, every request at most SC_MEGATRON_TIMEOUT, and a rank that
// exits, or fails while its peers wait in a collective, kills every other worker of the world at
// once. A request that fails on ranks which all answered, every group's collectives in step
// (a check that raises on every rank, say), leaves the world serving.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/rig/megatron_worker.h"

namespace sc::rig {

// A request of the world failed on `rank`: "rank R: what", the first failure (the others were
// stopped because of it).
class MegatronWorldFailed : public std::runtime_error {
 public:
  MegatronWorldFailed(int rank, const std::string& what);
  int rank;
};

class MegatronWorld {
 public:
  // `size` workers of `target`'s tree and device, joined (a failed rendezvous is tried again on
  // a fresh port, three tries in all); MegatronUnavailable when the tree cannot be served or
  // the rendezvous keeps failing, MegatronWorldFailed when a worker fails otherwise.
  MegatronWorld(const MegatronTarget& target, int size);
  // The world of `size` ranks of `target`, started on first use and kept until the process ends
  // or a request fails (a failed world is stopped and started afresh on next use).
  static MegatronWorld& of(const MegatronTarget& target, int size);

  int size() const { return static_cast<int>(workers_.size()); }
  MegatronWorker& worker(int rank) { return *workers_.at(rank); }
  // Whether the world was stopped after a failed request: its workers were killed and it
  // serves nothing more.
  bool failed() const { return failed_; }
  // Runs fn(rank) for every rank at once, one thread each. When one throws, the others get a
  // second to finish or fail. Where every rank answered (none lost, none still waiting) and every
  // process group has started as many collectives on each of its ranks, the world stays in step
  // and goes on serving; otherwise every worker is killed (no rank waits out a timeout). The
  // cause is thrown as MegatronWorldFailed either way: a rank whose worker was lost before one
  // whose collective saw it go, else the first failure.
  void on_every_rank(const std::function<void(int rank)>& fn);

 private:
  void join(const MegatronTarget& target, int size, int given_port);
  bool collectives_in_step();

  std::vector<std::unique_ptr<MegatronWorker>> workers_;
  bool failed_ = false;
};

// Whether the ranks' collective counts (each rank's `collective_counts` reply: group name to
// the collectives that group started on that rank) agree on every group, over its members.
bool same_collective_counts(const std::vector<nlohmann::json>& counts_by_rank);

}  // namespace sc::rig
