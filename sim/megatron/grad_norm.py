"""Megatron's `get_grad_norm_fp32` called directly on every rank of a grad-stats group of
emulated ranks (one process), each rank with its own grads: what the worker's `grad_norm` op
serves (sim/rig/grad_norm_call.h).

A call all-reduces what each rank computed, so a rank's answer depends on the others' shares
before the reduction, which are Megatron's own code's too. The ranks are run twice: the first
pass records each rank's tensor at each all-reduce (and leaves it as it is: what that pass
returns is dropped); the second gives each all-reduce the reduction of the recorded shares.
Megatron's function reads nothing else of the group, so the second pass sees what a real group
would deliver, provided every rank all-reduces the same number of times, which is checked.
What a rank raises in the first pass is the call's outcome, as it would be on that rank.
"""

import math

import torch

from rank import GroupStandIn, _refuse_as_nccl, from_bits
from te_stand_in import StandInRefused


class RecordingGroupStandIn(GroupStandIn):
    """The grad-stats group of `size` emulated ranks, seen from `rank`.

    Contract, from c10d's all_reduce on an NCCL group: it takes a tensor (a Python float raises
    TypeError in torch.distributed.all_reduce, before any group is asked), CUDA, dense and
    contiguous, and leaves in it on every member the reduction (SUM, MAX, ...) of the members'
    tensors. The stand-in records (first pass) or delivers (second pass) SUM and MAX of
    same-shaped tensors; any other op, and async_op, is refused by name. NCCL's SUM order is its
    own; the stand-in adds in rank order, which can differ from NCCL's in the last bit."""

    def __init__(self, size, rank, shares, delivering):
        super().__init__(size, rank)
        self.shares = shares  # shares[call][rank]: the recorded tensors
        self.delivering = delivering
        self.calls = 0

    def all_reduce(self, tensor, op):
        _refuse_as_nccl(tensor)
        call, self.calls = self.calls, self.calls + 1
        if not self.delivering:
            while len(self.shares) <= call:
                self.shares.append({})
            self.shares[call][self.rank()] = tensor.detach().clone()
            return
        if call >= len(self.shares) or len(self.shares[call]) != self.size():
            raise StandInRefused("an all-reduce that not every rank of the group joined: on real "
                                 "ranks it waits until the collective timeout")
        parts = [self.shares[call][r] for r in range(self.size())]
        if op == torch.distributed.ReduceOp.MAX:
            tensor.copy_(torch.stack(parts).amax(dim=0))
        elif op == torch.distributed.ReduceOp.SUM:
            total = parts[0].clone()
            for part in parts[1:]:
                total += part
            tensor.copy_(total)
        else:
            raise StandInRefused("the recording group stand-in reduces with SUM and MAX only")


def _norm_type(value):
    return math.inf if value == "inf" else float(value)


def grad_norm(clip_grads, grads, norm_type):
    """`grads[r]`: rank r's grads as fp32 bit lists. Returns {"norms": [per rank]} or, where a
    rank raised, {"rank": r, "raised": "Type: message"} for the first such rank."""
    p = _norm_type(norm_type)
    tensors = [[from_bits(g).to("cuda") for g in rank_grads] for rank_grads in grads]
    shares, size = [], len(grads)
    for r in range(size):
        group = RecordingGroupStandIn(size, r, shares, delivering=False)
        try:
            clip_grads.get_grad_norm_fp32([t.clone() for t in tensors[r]], p, group)
        except StandInRefused:
            raise
        except Exception as e:  # the call's outcome on rank r
            return {"rank": r, "raised": f"{type(e).__name__}: {e}"}
    norms = []
    for r in range(size):
        group = RecordingGroupStandIn(size, r, shares, delivering=True)
        norms.append(float(clip_grads.get_grad_norm_fp32(tensors[r], p, group)))
        if group.calls != len(shares):
            raise StandInRefused("a rank all-reduced fewer times than another")
    return {"norms": norms}
