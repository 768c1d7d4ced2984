"""Real ranks: this worker is one data-parallel rank of a world of workers joined by
torch.distributed over Gloo (docs/megatron-worker.md, "Real ranks").

A worker started with --world-rank R --world-size N --master ADDR:PORT joins the world at start-up
(a TCP rendezvous at ADDR:PORT, rank 0 holding the store) and every rank it builds is a real rank:
training mode, its data-parallel group a real Gloo group of the N workers, Megatron's own
DistributedDataParallel reducing the gradients (its reduce-scatter of every bucket, inside
finish_grad_sync) and the DistributedOptimizer all-gathering the parameters after each step.
Nothing of the other ranks is simulated. Every rank must send the same requests in the same order:
a rank whose peers do not join a collective waits at most the collective timeout, then raises
naming it.

The layout is Megatron's with tensor, context and pipeline parallelism 1: the dense data-parallel
group is every worker; with expert parallelism ep = dp / expert_dp, world rank g is expert-parallel
rank g % ep and expert data-parallel rank g // ep, its expert data-parallel group the ranks of its
expert-parallel rank. Refused with ValueError, naming the limit: a case whose dp is not the world
size or whose expert_dp does not divide it, a rank that is not this worker's (g for the dense
instance, g // ep for the expert one); no grad-stats or loss-scaler stand-ins (their simulated
other ranks would be real ones here).
"""

import datetime

import torch

STAND_INS = [
    "real ranks (--world-size): tensor, pipeline and expert model parallel groups of size 1 "
    "(stand-ins); the data-parallel and expert data-parallel groups are real Gloo groups of "
    "every worker of the world",
]


class World:
    """This worker's place in the world and the world's real process groups."""

    def __init__(self, rank, size, master, timeout_s):
        if not 0 <= rank < size:
            raise ValueError(f"--world-rank {rank} is not a rank of a world of {size}")
        address, _, port = master.rpartition(":")
        if not address or not port.isdigit():
            raise ValueError(f"--master {master!r} is not ADDR:PORT")
        self.rank, self.size = rank, size
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.init_method = f"tcp://{address}:{port}"
        self._dense = None
        self._expert = {}  # expert_dp -> this rank's expert data-parallel group

    def join(self):
        """The rendezvous: returns once every rank joined, or raises after the timeout."""
        torch.distributed.init_process_group("gloo", init_method=self.init_method,
                                             rank=self.rank, world_size=self.size,
                                             timeout=self.timeout)
        self._dense = torch.distributed.new_group(list(range(self.size)), timeout=self.timeout)

    def describe(self):
        return {"rank": self.rank, "size": self.size, "backend": "gloo",
                "timeout_s": self.timeout.total_seconds()}

    def expert_parallel(self, case):
        return self.size // case["expert_dp"]

    def check(self, request):
        """Refuses a build this world cannot serve."""
        case = request["case"]
        if case["dp"] != self.size:
            raise ValueError(f"real ranks: the case's dp {case['dp']} is not the world size "
                             f"{self.size}")
        if case["expert_dp"] < 1 or case["dp"] % case["expert_dp"] != 0:
            raise ValueError(f"real ranks: expert_dp {case['expert_dp']} does not divide dp "
                             f"{case['dp']}")
        expected = self.rank
        if request["instance"] == "expert":
            expected = self.rank // self.expert_parallel(case)
        if request["rank"] != expected:
            raise ValueError(f"real ranks: {request['instance']} rank {request['rank']} asked of "
                             f"world rank {self.rank}, which holds {request['instance']} rank "
                             f"{expected}")

    def dense(self):
        return self._dense

    @staticmethod
    def collective_counts():
        """How many collectives each process group of this rank has started, by group name.
        After a request failed, equal counts on every member of every group mean no rank is
        inside a collective its peers left: the world is still in step."""
        c10d = torch.distributed.distributed_c10d
        return {c10d._world.pg_names[group]: group._get_sequence_number_for_group()
                for group in c10d._world.pg_map}

    def expert(self, expert_dp):
        """This rank's expert data-parallel group of a case with `expert_dp`. Made on first use
        by every rank at once (every rank builds the same case): all ep groups, in order."""
        if expert_dp not in self._expert:
            ep = self.size // expert_dp
            for k in range(ep):
                members = [g for g in range(self.size) if g % ep == k]
                group = torch.distributed.new_group(members, timeout=self.timeout)
                if self.rank % ep == k:
                    self._expert[expert_dp] = group
        return self._expert[expert_dp]


def built_on_every_rank(world_size, build):
    """`build()` on this rank, then every rank's failure gathered on every rank before the
    collectives that follow: where a build raised, every rank raises alike, naming the first such
    DP rank, so that none waits in a collective for a rank that left it. Returns what `build`
    returned."""
    try:
        value, failure = build(), ""
    except Exception as e:  # noqa: BLE001 - named on every rank below
        value, failure = None, f"{type(e).__name__}: {e}".rstrip(": ")
    failures = [None] * world_size
    torch.distributed.all_gather_object(failures, failure)
    for i, failed in enumerate(failures):
        if failed:
            raise RuntimeError(f"DP rank {i}'s save raised {failed}")
    return value
