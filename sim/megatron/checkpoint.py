"""Checkpoints of one rank held by the worker: what RankUnderTest::save and load exchange
(sim/rig/rank_under_test.h): the model weights, the distributed optimizer's fp32 main params and
the hybrid optimizer's state_dict, each a copy."""

import torch


def copied(value, move=None):
    """`value` with every tensor cloned (or moved by `move`), containers rebuilt, the rest kept."""
    if isinstance(value, torch.Tensor):
        return move(value) if move is not None else value.detach().clone()
    if isinstance(value, dict):
        return {k: copied(v, move) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(v, move) for v in value)
    return value


def hybrid_optimizer(rank):
    rank.require_constructed()
    hdo = rank.hdo()
    if hdo is None:
        raise RuntimeError("checkpoints are served for the hybrid optimizer only")
    return hdo


def save(rank):
    hdo = hybrid_optimizer(rank)
    with torch.no_grad():
        return {"weights": [p.detach().clone() for p in rank.params],
                "mains": [[None if t is None else t.detach().clone() for t in group]
                          for group in rank.dist.shard_fp32_from_float16_groups],
                "hdo": copied(hdo.state_dict())}


def load(rank, checkpoint, map_to_host):
    """Model weights, main params, then hdo.load_state_dict with its hooks, given a copy: torch
    2.x's load_state_dict keeps the tensors it is given, and a checkpoint may be loaded again.
    `map_to_host`: the state dict as torch.load(map_location="cpu") returns it, every tensor on
    the host."""
    hdo = hybrid_optimizer(rank)
    with torch.no_grad():
        for param, weights in zip(rank.params, checkpoint["weights"]):
            param.detach().copy_(weights)
        for group, saved in zip(rank.dist.shard_fp32_from_float16_groups, checkpoint["mains"]):
            for tensor, value in zip(group, saved):
                if tensor is not None:
                    tensor.detach().copy_(value)
    move = (lambda t: t.detach().cpu().clone()) if map_to_host else None
    hdo.load_state_dict(copied(checkpoint["hdo"], move))
