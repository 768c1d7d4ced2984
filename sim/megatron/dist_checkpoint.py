"""Megatron's distributed checkpoint of one rank, as `load_checkpoint` resumes from one: the
model's and the DistributedOptimizer's sharded state dicts saved with dist_checkpointing's
mapping, then, into a freshly built rank, `sharded_state_dict(is_loading=True)` (which runs
`load_state_dict(state_dict())` on the fresh optimizer), the linked tensors filled in place, and
`load_state_dict` of what the load returned.

The optimizer's param state is in `dp_reshardable`, the sharding type Megatron saves by default
(--ckpt-format torch_dist; `fully_sharded_model_space` cannot be saved in the trees of 2026).
The storage is this process's memory, written by every DP rank of the group as the torch_dist
strategy writes its files: each main replica's data by where it goes (its key and global offset),
and rank 0's common state, which every rank loads. The DP ranks are emulated in one process, so
dist_checkpointing's own save and load, which gather and check the ranks' plans with
collectives, are not called: its extract, merge and replica functions are.
"""

import copy
import importlib

import torch

SHARDING_TYPE = "dp_reshardable"
METADATA = {"distrib_optim_sharding_type": SHARDING_TYPE}
# The per-param state entries that are not tensors, as Megatron's own test of PR #3537 puts them
# (tests/unit_tests/test_optimizer.py, test_distrib_optimizer_save_load_with_non_tensor_state).
NON_TENSOR_VALUES = {"found_inf": False}
OTHER_NON_TENSOR_VALUE = 42


class Saved:
    """A distributed checkpoint of one DP group, as its ranks save it together: the data of every
    main replica among their ShardedTensors and ShardedObjects by where it goes (key and global
    offset), and the common state, which dist_checkpointing writes from rank 0 alone and every
    rank loads. What a rank's save raised is raised again by the loads (a save that fails leaves
    nothing to resume from)."""

    def __init__(self):
        self.shards, self.common, self.error = {}, None, None


def _modules():
    utils = importlib.import_module("megatron.core.dist_checkpointing.utils")
    dict_utils = importlib.import_module("megatron.core.dist_checkpointing.dict_utils")
    mapping = importlib.import_module("megatron.core.dist_checkpointing.mapping")
    return utils, dict_utils, mapping


def _copied(data):
    return data.detach().clone() if isinstance(data, torch.Tensor) else copy.deepcopy(data)


def _where(value):
    return value.key, tuple(value.global_offset)


def _sharded_state_dict(rank, is_loading):
    """The model's params (one ShardedTensor each, keyed by the case's name, replicated over DP)
    and the optimizer's sharded state dict linked to them."""
    _, _, mapping = _modules()
    names = [rank.case["params"][i]["name"] for i in rank.case_index]
    model = {f"model.{name}": mapping.ShardedTensor.from_rank_offsets(
        f"model.{name}", param, replica_id=(0, 0, rank.rank))
        for name, param in zip(names, rank.params)}
    optimizer = rank.dist.sharded_state_dict(model, is_loading=is_loading, metadata=METADATA)
    return {"model": model, "optimizer": optimizer}


def save(rank, saved):
    """Adds `rank`'s part to `saved`; DP rank 0 writes the common state."""
    rank.require_constructed()
    utils, dict_utils, mapping = _modules()
    try:
        _, persistent = utils.extract_nonpersistent(_sharded_state_dict(rank, is_loading=False))
    except Exception as e:  # noqa: BLE001 - raised again by the loads
        if saved.error is None:
            saved.error = RuntimeError(f"DP rank {rank.rank}'s save raised "
                                       f"{type(e).__name__}: {e}".rstrip(": "))
        return
    sharded, common = utils.extract_sharded_base(persistent)
    for value in dict_utils.nested_values(sharded):
        if mapping.is_main_replica(value.replica_id):
            saved.shards[_where(value)] = _copied(value.data)
    if rank.rank == 0:
        saved.common = _copied(common)


def _read(value, shards, mapping):
    saved = shards.get(_where(value))
    if saved is None:
        raise KeyError(f"the checkpoint holds nothing at {value.key} offset "
                       f"{tuple(value.global_offset)}")
    if isinstance(value, mapping.ShardedTensor):
        with torch.no_grad():
            value.data.copy_(saved)
        return value.data.detach()
    return copy.deepcopy(saved)


def load(rank, saved):
    """Resumes `rank` (freshly built) from `saved`, as load_checkpoint does."""
    rank.require_constructed()
    if saved.error is not None:
        raise saved.error
    if saved.common is None:
        raise ValueError("the checkpoint has no common state: DP rank 0 did not save its part")
    utils, dict_utils, mapping = _modules()
    nonpersistent, persistent = utils.extract_nonpersistent(
        _sharded_state_dict(rank, is_loading=True))
    sharded, _ = utils.extract_sharded_base(persistent)
    state = _copied(saved.common)
    dict_utils.merge(state, dict_utils.dict_list_map_inplace(lambda v: v.unwrap(), nonpersistent))
    dict_utils.merge(state, dict_utils.dict_list_map_inplace(
        lambda v: _read(v, saved.shards, mapping), sharded))
    rank.dist.load_state_dict(state["optimizer"])


def add_non_tensor_state(rank, keys):
    """Puts `keys` in the inner optimizer's state of every param that has state. Not into
    Transformer Engine's FusedAdam, whose state_dict asks for the unscaled value of every entry
    and knows three (a KeyError there, in TE's code, not Megatron's): Megatron's test puts them
    in a torch optimizer's state, and so does this."""
    rank.require_constructed()
    inner = rank.dist.optimizer
    if rank.fused_adam() is inner:
        return
    for param in list(inner.state):
        for key in keys:
            inner.state[param][key] = NON_TENSOR_VALUES.get(key, OTHER_NON_TENSOR_VALUE)

