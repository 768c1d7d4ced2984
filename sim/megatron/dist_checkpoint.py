"""Megatron's distributed checkpoint of one rank, as `load_checkpoint` resumes from one: the
model's and the DistributedOptimizer's sharded state dicts saved with dist_checkpointing's
mapping, then, into a freshly built rank, `sharded_state_dict(is_loading=True)` (which runs
`load_state_dict(state_dict())` on the fresh optimizer), the linked tensors filled in place, and
`load_state_dict` of what the load returned.

The optimizer's param state is in `dp_reshardable`, the sharding type Megatron saves by default
(--ckpt-format torch_dist; `fully_sharded_model_space` cannot be saved in the trees of 2026), or,
on real ranks, `fully_reshardable` (--dist-ckpt-optim-fully-reshardable: the save all-gathers the
param state over the DP group and cuts it into model-space tensors).
The storage is written by every DP rank of the group as the torch_dist strategy writes its files:
each main replica's data by where it goes (its key and global offset), and rank 0's common state,
which every rank loads. With the DP ranks emulated in one process it is this process's memory,
and dist_checkpointing's own save and load, which gather and check the ranks' plans with
collectives, are not called: its extract, merge and replica functions are. What the torch_dist
save's coordinator checks of the gathered plans is checked here before any load
(validate_plan): a save whose main replicas leave part of a tensor unwritten, or write part of
it twice, fails there as it does in torch.distributed.checkpoint's global plan. On real ranks
(one process each) the checkpoint is a directory the group shares: where psutil is installed
and the world has no expert parallelism, Megatron's own torch_dist save and load write and read
it (torch_dist_writer); elsewhere one file per rank of ours, after the same plan check
(save_to, load_from).
"""

import copy
import importlib
import importlib.util
import math
import os

import torch

from world import built_on_every_rank

SHARDING_TYPE = "dp_reshardable"
REAL_RANKS_TYPES = ("dp_reshardable", "fully_reshardable")
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

    def __init__(self, sharding_type=SHARDING_TYPE):
        self.sharding_type = sharding_type
        self.shards, self.common, self.error = {}, None, None
        # What the save plans hold: each tensor key's global shape and the (offset, shape) of
        # every main replica's chunk of it, how many ranks saved and how many the DP group has
        # (see validate_plan).
        self.shapes, self.chunks, self.ranks, self.group = {}, {}, 0, 0
        self.pieces = []  # one process only: (model key, flat start, values), see _owned_pieces


def _modules():
    utils = importlib.import_module("megatron.core.dist_checkpointing.utils")
    dict_utils = importlib.import_module("megatron.core.dist_checkpointing.dict_utils")
    mapping = importlib.import_module("megatron.core.dist_checkpointing.mapping")
    return utils, dict_utils, mapping


def _copied(data):
    return data.detach().clone() if isinstance(data, torch.Tensor) else copy.deepcopy(data)


def _where(value):
    return value.key, tuple(value.global_offset)


def _model_params(rank):
    """(checkpoint key, param) of each of the rank's model params, keyed by the case's name."""
    names = [rank.case["params"][i]["name"] for i in rank.case_index]
    return [(f"model.{name}", param) for name, param in zip(names, rank.params)]


def _owned_pieces(rank):
    """The rank's stepped piece of each model param it owns, as (key, flat start, values): what
    Megatron's param all-gather after every step hands every other rank. One process runs no
    all-gather (each emulated rank's params hold its own pieces only, and the main replica of the
    weights is DP rank 0's), so the save keeps every rank's pieces and the load lays them over
    the weights read, as the all-gathered weights of real ranks would hold them."""
    out = []
    for key, param in _model_params(rank):
        try:
            piece = rank.dist._get_model_param_range_map(param)["param"]
        except KeyError:  # no piece of this param on this rank
            continue
        out.append((key, piece.start, _copied(param.detach().view(-1)[piece.start:piece.end])))
    return out


def _lay_pieces(rank, pieces):
    params = dict(_model_params(rank))
    with torch.no_grad():
        for key, start, values in pieces:
            params[key].detach().view(-1)[start:start + values.numel()].copy_(values)


def _sharded_state_dict(rank, is_loading, sharding_type, with_optimizer=True):
    """The model's params (one ShardedTensor each, keyed by the case's name, replicated over DP)
    and, `with_optimizer`, the optimizer's sharded state dict of `sharding_type` linked to
    them (the trainer leaves a stub optimizer's out)."""
    _, _, mapping = _modules()
    model = {key: mapping.ShardedTensor.from_rank_offsets(key, param, replica_id=(0, 0, rank.rank))
             for key, param in _model_params(rank)}
    if not with_optimizer:
        return {"model": model}
    metadata = {"distrib_optim_sharding_type": sharding_type}
    optimizer = rank.dist.sharded_state_dict(model, is_loading=is_loading, metadata=metadata)
    return {"model": model, "optimizer": optimizer}


def _group_size(rank):
    """The DP group the checkpoint is saved by: one rank for an optimizer that shards nothing."""
    return 1 if rank.whole_params else rank.dist.data_parallel_group.size()


def save(rank, saved, with_optimizer=True):
    """Adds `rank`'s part to `saved`; DP rank 0 writes the common state."""
    rank.require_constructed()
    utils, dict_utils, mapping = _modules()
    try:
        _, persistent = utils.extract_nonpersistent(
            _sharded_state_dict(rank, False, saved.sharding_type, with_optimizer))
    except Exception as e:  # noqa: BLE001 - raised again by the loads
        if saved.error is None:
            saved.error = RuntimeError(f"DP rank {rank.rank}'s save raised "
                                       f"{type(e).__name__}: {e}".rstrip(": "))
        return
    sharded, common = utils.extract_sharded_base(persistent)
    for value in dict_utils.nested_values(sharded):
        if mapping.is_main_replica(value.replica_id):
            saved.shards[_where(value)] = _copied(value.data)
            _plan(saved, value, mapping)
    saved.ranks += 1
    saved.group = _group_size(rank)
    if rank.rank == 0:
        saved.common = _copied(common)
    if rank.world is None and not rank.whole_params:
        saved.pieces.extend(_owned_pieces(rank))


def _plan(saved, value, mapping):
    """Records the chunk a main replica's ShardedTensor writes, as torch_dist's save plan has it."""
    if not isinstance(value, mapping.ShardedTensor) or value.flattened_range is not None:
        return  # objects are bytes; no format saved here has flattened tensors
    saved.shapes[value.key] = tuple(value.global_shape)
    saved.chunks.setdefault(value.key, []).append(
        (tuple(value.global_offset), tuple(value.local_shape)))


def _overlap(a, b):
    return all(ao < bo + bs and bo < ao + as_ for ao, as_, bo, bs in zip(*a, *b))


def _key_problems(shape, chunks, whole):
    problems = [f"chunk at {o} of shape {s} lies outside {shape}" for o, s in chunks
                if any(x < 0 or x + n > g for x, n, g in zip(o, s, shape))]
    problems += [f"chunks at {a[0]} and {b[0]} overlap"
                 for i, a in enumerate(chunks) for b in chunks[i + 1:] if _overlap(a, b)]
    volume, want = sum(math.prod(s) for _, s in chunks), math.prod(shape)
    if whole and volume != want:
        problems.append(f"the chunks hold {volume} of its {want} elements")
    return problems


def validate_plan(saved):
    """Raises where the saved main replicas would fail the global plan the torch_dist save's
    coordinator validates (torch.distributed.checkpoint, torch 2.11: every chunk inside its
    tensor, no two chunks of a tensor overlapping, and, with more than one rank, the chunks'
    volume the tensor's). The volume only where every rank of the DP group saved: above DP 8
    the properties build a sample of the ranks, whose chunks cover part of each tensor."""
    whole = saved.ranks > 1 and saved.ranks == saved.group
    problems = [f"{key}: {p}" for key, shape in sorted(saved.shapes.items()) if shape
                for p in _key_problems(shape, saved.chunks[key], whole)]
    if problems:
        raise RuntimeError("the save fails torch.distributed.checkpoint's validation of its "
                           "global plan: " + "; ".join(problems))


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


def _loadable(rank, saved):
    rank.require_constructed()
    if saved.error is not None:
        raise saved.error
    if saved.common is None:
        raise ValueError("the checkpoint has no common state: DP rank 0 did not save its part")
    validate_plan(saved)


def load_weights(rank, saved):
    """Loads the model's weights alone into `rank` from `saved`, as load_checkpoint does when it
    loads no optimizer state (--finetune, --no-load-optim, or a stub optimizer)."""
    _loadable(rank, saved)
    _, dict_utils, mapping = _modules()
    model = _sharded_state_dict(rank, True, saved.sharding_type, with_optimizer=False)
    dict_utils.dict_list_map_inplace(lambda v: _read(v, saved.shards, mapping), model)
    _lay_pieces(rank, saved.pieces)


def model_weights(saved):
    """The model's weights in `saved` of whole parameters, by parameter name: what the trainer's
    loaded state dict holds under "model" (the checkpoint's dtype, not the model's)."""
    return {key[len("model."):]: _copied(data)
            for (key, offset), data in sorted(saved.shards.items())
            if key.startswith("model.") and not any(offset)}


def load(rank, saved):
    """Resumes `rank` (freshly built) from `saved`, as load_checkpoint does."""
    _loadable(rank, saved)
    utils, dict_utils, mapping = _modules()
    nonpersistent, persistent = utils.extract_nonpersistent(
        _sharded_state_dict(rank, True, saved.sharding_type))
    sharded, _ = utils.extract_sharded_base(persistent)
    state = _copied(saved.common)
    dict_utils.merge(state, dict_utils.dict_list_map_inplace(lambda v: v.unwrap(), nonpersistent))
    dict_utils.merge(state, dict_utils.dict_list_map_inplace(
        lambda v: _read(v, saved.shards, mapping), sharded))
    _lay_pieces(rank, saved.pieces)
    rank.dist.load_state_dict(state["optimizer"])


def _file_prefix(rank):
    """The files of one checkpoint group: the DP group of this rank's instance and, for the
    experts, of its expert-parallel rank (whose experts are its own)."""
    ep_rank = rank.world.rank % rank.world.expert_parallel(rank.case) if rank.expert else 0
    return f"ep{ep_rank}-"


def _require_real(rank, directory, op):
    if rank.world is None:
        raise ValueError(f"{op}: a checkpoint directory is shared by real ranks only "
                         "(--world-size); one process emulates the DP group in memory")
    if not os.path.isdir(directory):
        raise ValueError(f"{op}: no directory {directory!r}")


def _host(value):
    """A plain host copy of a saved value, as torch.save writes it."""
    if isinstance(value, torch.Tensor):
        return torch.Tensor.cpu(value).clone().as_subclass(torch.Tensor)
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_host(v) for v in value)
    return value


def torch_dist_writer(rank):
    """Whether this real rank's world saves and loads through Megatron's own torch_dist strategy
    (dist_checkpointing.save and load, collective over the world): where psutil, which its
    asynchronous writer needs, is installed, and the world is one DP group (with expert
    parallelism the ranks hold different experts under the same keys, and write files of
    their own, see _file_prefix)."""
    return (importlib.util.find_spec("psutil") is not None
            and rank.world.expert_parallel(rank.case) == 1)


def _save_torch_dist(rank, directory, sharding_type):
    """Every rank builds its sharded state dict, then all save it through the torch_dist
    strategy; a rank whose build raised is named on every rank before any collective of the
    save, which would otherwise wait for it."""
    state = built_on_every_rank(rank.world.size,
                                lambda: _sharded_state_dict(rank, False, sharding_type))
    importlib.import_module("megatron.core.dist_checkpointing").save(
        state, directory, content_metadata={"distrib_optim_sharding_type": sharding_type})


def _load_torch_dist(rank, directory):
    dist_checkpointing = importlib.import_module("megatron.core.dist_checkpointing")
    sharding_type = dist_checkpointing.load_content_metadata(directory)[
        "distrib_optim_sharding_type"]
    state = dist_checkpointing.load(_sharded_state_dict(rank, True, sharding_type), directory)
    rank.dist.load_state_dict(state["optimizer"])


def save_to(rank, directory, sharding_type):
    """Real ranks, every rank of the world at once (the fully_reshardable save all-gathers):
    saves through Megatron's torch_dist strategy where torch_dist_writer says so; otherwise
    writes this rank's main replicas, and on DP rank 0 the common state, to its own file in
    `directory`. A save that raises on a rank raises there."""
    _require_real(rank, directory, "save_sharded")
    if sharding_type not in REAL_RANKS_TYPES:
        raise ValueError(f"save_sharded: sharding type {sharding_type!r} is not one of "
                         f"{', '.join(REAL_RANKS_TYPES)}")
    if torch_dist_writer(rank):
        _save_torch_dist(rank, directory, sharding_type)
        return
    saved = Saved(sharding_type)
    save(rank, saved)
    if saved.error is not None:
        # Raised here, not left for the load: a rank whose build raised before the save's
        # all-gather would leave its peers waiting in it until the collective timeout; raised,
        # the world stops them (world.py), or goes on in step where every rank raised alike.
        raise saved.error
    part = {"sharding_type": sharding_type, "shards": _host(saved.shards),
            "common": _host(saved.common), "shapes": saved.shapes, "chunks": saved.chunks,
            "group": saved.group}
    torch.save(part, os.path.join(directory, f"{_file_prefix(rank)}dp{rank.rank}.pt"))


def load_from(rank, directory):
    """Resumes `rank` (freshly built, a real rank) from every file of its group in `directory`,
    as load() from memory."""
    _require_real(rank, directory, "load_sharded")
    if os.path.exists(os.path.join(directory, "metadata.json")):  # torch_dist's
        _load_torch_dist(rank, directory)
        return
    prefix = _file_prefix(rank)
    names = sorted(n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".pt"))
    if not names:
        raise ValueError(f"load_sharded: no checkpoint files {prefix}*.pt in {directory!r}")
    saved = None
    for name in names:
        part = torch.load(os.path.join(directory, name), weights_only=False)
        saved = saved or Saved(part["sharding_type"])
        saved.shards.update(part["shards"])
        saved.shapes.update(part["shapes"])
        for key, chunks in part["chunks"].items():
            saved.chunks.setdefault(key, []).extend(chunks)
        saved.ranks += 1
        saved.group = part["group"]
        if part["common"] is not None:
            saved.common = part["common"]
    load(rank, saved)


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

