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

Limits (the request is refused with ValueError, naming the limit): expert parallelism 1 (the
expert data-parallel group is the dense one), the case's dp equal to the world size, the request's
rank equal to the worker's; no grad-stats or loss-scaler stand-ins (their simulated other ranks
would be real ones here).
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
        self._groups = None

    def join(self):
        """The rendezvous: returns once every rank joined, or raises after the timeout."""
        torch.distributed.init_process_group("gloo", init_method=self.init_method,
                                             rank=self.rank, world_size=self.size,
                                             timeout=self.timeout)
        # Two groups of every rank, made by every rank in the same order (new_group is
        # collective): the dense data-parallel group and the expert one, which EP 1 makes the
        # same ranks but Megatron holds apart.
        everyone = list(range(self.size))
        self._groups = (torch.distributed.new_group(everyone, timeout=self.timeout),
                        torch.distributed.new_group(everyone, timeout=self.timeout))

    def describe(self):
        return {"rank": self.rank, "size": self.size, "backend": "gloo",
                "timeout_s": self.timeout.total_seconds()}

    def check(self, request):
        """Refuses a build this world cannot serve."""
        case = request["case"]
        if case["dp"] != self.size:
            raise ValueError(f"real ranks: the case's dp {case['dp']} is not the world size "
                             f"{self.size}")
        if case["expert_dp"] != case["dp"]:
            raise ValueError(f"real ranks: expert parallelism 1 only (expert_dp "
                             f"{case['expert_dp']} != dp {case['dp']})")
        if request["rank"] != self.rank:
            raise ValueError(f"real ranks: rank {request['rank']} asked of the worker of rank "
                             f"{self.rank}")

    def dense(self):
        return self._groups[0]

    def expert(self):
        return self._groups[1]
