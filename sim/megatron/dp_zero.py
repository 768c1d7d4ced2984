"""Megatron's checkpoint of the DistributedOptimizer in the `torch` format (`--ckpt-format torch`,
and the "dp_zero_gather_scatter" param state): on save every DP rank keeps its `state_dict()`
and the param state is gathered into world tensors on DP rank 0 (`get_parameter_state_dp_zero`
over the Gloo data-parallel group, what `save_parameter_state` writes); on load, as
`load_checkpoint` does, the model weights first, then `load_state_dict`, then
`load_parameter_state_from_dp_zero` scatters DP rank 0's world tensors back.

Real ranks only: the gather and the scatter are collectives, which every rank of the world joins
at once (world.py). The storage is this worker's memory: each rank keeps what it would write.
"""

import torch

from checkpoint import copied
from world import built_on_every_rank


class Saved:
    """One rank's part of a torch-format checkpoint: its model weights, its optimizer's
    `state_dict()` and the gathered param state (None but on DP rank 0), each a copy. What the save
    raised is raised again by the load."""

    def __init__(self, weights=None, optimizer=None, param_state=None, error=None):
        self.weights, self.optimizer, self.param_state = weights, optimizer, param_state
        self.error = error


def _require_real(rank, op):
    if rank.world is None:
        raise ValueError(f"{op}: the torch format gathers and scatters over the DP group, served "
                         "on real ranks only (--world-size)")
    rank.require_constructed()


def save(rank):
    """Every rank of the DP group at once. A rank whose `state_dict()` raised is named on every
    rank before the gather, which would otherwise wait for it until the collective timeout; the
    save then raises alike on every rank, which leaves the world in step. What raises on one rank
    inside the gather's own code raises there, and the world is stopped (world.py) rather than
    left waiting."""
    _require_real(rank, "save_dp_zero")
    weights = [p.detach().clone() for p in rank.params]
    optimizer = built_on_every_rank(rank.world.size, lambda: copied(rank.dist.state_dict()))
    try:
        param_state = copied(rank.dist.get_parameter_state_dp_zero())
    except Exception as e:
        raise RuntimeError(f"the save raised {type(e).__name__}: {e}") from e
    return Saved(weights, optimizer, param_state)


def load(rank, saved):
    """Every rank of the DP group at once, each with its own part."""
    _require_real(rank, "load_dp_zero")
    if saved.error is not None:
        raise saved.error
    with torch.no_grad():
        for param, weights in zip(rank.params, saved.weights):
            param.detach().copy_(weights)
    rank.dist.load_state_dict(copied(saved.optimizer))
    rank.dist.load_parameter_state_from_dp_zero(copied(saved.param_state))
