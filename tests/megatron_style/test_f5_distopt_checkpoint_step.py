"""Resuming the distributed optimizer from a distributed checkpoint must keep its step count.

`dist_checkpointing.load` of the optimizer goes through `DistributedOptimizer.sharded_state_dict(
is_loading=True)`: it runs `load_state_dict(state_dict())` on the optimizer about to load and
links the tensors of its state, which the load fills in place. `load_state_dict` then sets the
step from the loaded param groups and copies the parameter state with
`_set_main_param_and_optimizer_states` (`load_parameter_state_from_dp_reshardable` for the
default `dp_reshardable` format, `load_parameter_state_from_fully_reshardable` for
`fully_reshardable`). Several steps of this path mishandle the step count, which torch's AdamW
keeps as a tensor in each parameter's state and FusedAdam as a value in each param group:

- Without Transformer Engine or Apex the factory's Adam is `torch.optim.AdamW`, and `state_dict()`
  asserts that the per-parameter state holds exactly one `step`. The optimizer about to load has
  no state yet, so the load stops with an AssertionError.
- `load_state_dict` gives every parameter's state the same `step` tensor, which torch's AdamW
  then increments in place once per parameter.
- `_set_main_param_and_optimizer_states` treats `step` as one of the state tensors. Without the
  precision-aware optimizer it copies every tensor of the live state, and the `fully_reshardable`
  state holds no step: KeyError. The `dp_reshardable` state holds, for each parameter, the step
  the optimizer had before the load (a LocalNonpersistentObject), which replaces the loaded one.
- With the hybrid optimizer, `state_dict()` takes the step only from a host torch AdamW that has
  stepped. With nothing offloaded there is none: no step is saved, and the accelerator FusedAdam
  counts from 0 again. Where a step is saved, the load leaves it in the hybrid optimizer's param
  groups, and `_sync_hdo_param_groups_to_sub_optimizers` copies it into the FusedAdam's groups
  before every step: the count stays at the saved step plus one.

Each case steps, saves, resumes into a fresh optimizer and steps on; the states must equal
those of the optimizer that stepped on without the interruption. The checkpoint goes through
`dist_checkpointing.save` and `load` with the default `torch_dist` strategy into a temporary
directory (Megatron's writer needs psutil), and through an in-memory stand-in of that storage
on one rank, which needs nothing more.
"""

import copy

import pytest
import torch

from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.dict_utils import dict_list_map_inplace, merge, nested_values
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.dist_checkpointing.utils import extract_nonpersistent, extract_sharded_base
from megatron.core.optimizer import OptimizerConfig

from dp1_helpers import bf16_params, distributed_optimizer, skip_without_torch_dist_writer, step

try:
    from transformer_engine.pytorch.optimizers import FusedAdam  # noqa: F401

    HAVE_TE = True
except ImportError:
    HAVE_TE = False

SHAPES = [(4,), (2, 3)]
GRADS = [
    [[1.0, -2.0, 0.5, 0.25], [-0.5, 1.0, 0.75, -1.0, 0.25, 2.0]],
    [[0.5, 0.25, -1.0, 2.0], [1.0, -0.25, 0.5, 0.75, -2.0, 0.5]],
    [[-1.0, 0.5, 2.0, -0.25], [0.25, 0.5, -1.0, 1.0, 0.75, -0.5]],
    [[0.75, -0.5, 0.25, 1.0], [-2.0, 0.25, 1.0, -0.5, 0.5, 1.0]],
]
# The checkpoint is taken after this many of the steps of GRADS.
STEPS_BEFORE = 2
OPTIMIZER_CASES = {
    # The factory's Adam: Transformer Engine's (or Apex's) FusedAdam, else torch.optim.AdamW.
    "adam": {},
    # --optimizer-cpu-offload (precision-aware): everything on the host torch AdamW.
    "hybrid": {
        "use_precision_aware_optimizer": True,
        "optimizer_cpu_offload": True,
        "optimizer_offload_fraction": 1.0,
    },
    # One param on the host torch AdamW, the other on the accelerator Adam.
    "hybrid-mixed": {
        "use_precision_aware_optimizer": True,
        "optimizer_cpu_offload": True,
        "optimizer_offload_fraction": 0.25,
    },
    # Nothing offloaded: the accelerator Adam only.
    "hybrid-accelerator": {
        "use_precision_aware_optimizer": True,
        "optimizer_cpu_offload": True,
        "optimizer_offload_fraction": 0.0,
    },
    # Not precision-aware (not reachable from the command line): host torch AdamW only.
    "hybrid-not-precision-aware": {
        "optimizer_cpu_offload": True,
        "optimizer_offload_fraction": 1.0,
    },
}
# Where the checkpoint goes: Megatron's torch_dist files, or the in-memory stand-in below.
STORAGES = ["torch_dist", "in_memory"]
# The formats Megatron's checkpointing chooses: `dp_reshardable` by default, `fully_reshardable`
# with --dist-ckpt-optim-fully-reshardable.
SHARDING_TYPES = ["dp_reshardable", "fully_reshardable"]
# The hybrid optimizer without precision-aware keeps its host copies in its state as
# "master_param", which a fully_reshardable checkpoint does not hold.
CASES = [
    (case, sharding_type, storage)
    for case in OPTIMIZER_CASES
    for sharding_type in SHARDING_TYPES
    for storage in STORAGES
    if (case, sharding_type) != ("hybrid-not-precision-aware", "fully_reshardable")
]


def _distributed_optimizer(case):
    """A bf16 model's DistributedOptimizer, built by the optimizer factory with the options of
    OPTIMIZER_CASES[case]."""
    params = bf16_params(SHAPES)
    config = OptimizerConfig(
        optimizer="adam",
        lr=1e-3,
        bf16=True,
        use_distributed_optimizer=True,
        overlap_cpu_optimizer_d2h_h2d=False,
        **OPTIMIZER_CASES[case],
    )
    return distributed_optimizer(config, params)[0], params


def _model_sharded_state_dict(params):
    return {
        f"param{i}": ShardedTensor.from_rank_offsets(f"param{i}", param, replica_id=(0, 0, 0))
        for i, param in enumerate(params)
    }


def _copy(data):
    return data.detach().clone() if isinstance(data, torch.Tensor) else copy.deepcopy(data)


def _where(value):
    """Where a ShardedTensor's or ShardedObject's data is in the checkpoint; on one rank, the
    key and the global offset name it (several params of a bucket share a key)."""
    return value.key, tuple(value.global_offset)


def _save(sharded_state_dict):
    """What dist_checkpointing.save writes of `sharded_state_dict` on one rank, copied: the data
    of each ShardedTensor and ShardedObject by where it goes, and the common state (everything
    else but the LocalNonpersistentObjects)."""
    _, persistent = extract_nonpersistent(sharded_state_dict)
    sharded, common = extract_sharded_base(persistent)
    stored = {_where(value): _copy(value.data) for value in nested_values(sharded)}
    return stored, _copy(common)


def _read(value, saved):
    """A ShardedTensor's saved data read into its tensor in place, as the torch_dist strategy
    reads it; a ShardedObject's saved object."""
    if isinstance(value, ShardedTensor):
        with torch.no_grad():
            value.data.copy_(saved)
        return value.data.detach()
    return copy.deepcopy(saved)


def _load(sharded_state_dict, checkpoint):
    """What dist_checkpointing.load of `sharded_state_dict` returns on one rank: the saved common
    state, merged with the values of its LocalNonpersistentObjects and with the data saved where
    its ShardedTensors and ShardedObjects point."""
    stored, common = checkpoint
    nonpersistent, persistent = extract_nonpersistent(sharded_state_dict)
    sharded, _ = extract_sharded_base(persistent)
    state_dict = _copy(common)
    merge(state_dict, dict_list_map_inplace(lambda value: value.unwrap(), nonpersistent))
    merge(state_dict, dict_list_map_inplace(lambda value: _read(value, stored[_where(value)]),
                                            sharded))
    return state_dict


def _param_states(optimizer, params):
    """Per model param, on the host: the model param, its main param ("param") and the
    optimizer's state tensors."""
    states = []
    for param in params:
        tensors = optimizer._get_main_param_and_optimizer_states(param)
        state = {key: value.detach().cpu().clone() for key, value in tensors.items()}
        state["model_param"] = param.detach().cpu().clone()
        states.append(state)
    return states


def _sharded_state_dict(optimizer, params, metadata, is_loading=False):
    """The model's and the optimizer's sharded state dicts, as a checkpoint holds them."""
    model = _model_sharded_state_dict(params)
    return {
        "model": model,
        "optimizer": optimizer.sharded_state_dict(
            model, is_loading=is_loading, metadata=metadata
        ),
    }


def _storage(name, directory):
    """(save, load) of a sharded state dict: save returns the checkpoint, load(sharded state
    dict, checkpoint) the loaded state dict."""
    if name == "in_memory":
        return _save, _load
    skip_without_torch_dist_writer()

    def save(sharded_state_dict):
        dist_checkpointing.save(sharded_state_dict, str(directory))
        return str(directory)

    return save, dist_checkpointing.load


def _checkpoint_after_steps(case, metadata, save):
    """An optimizer stepped STEPS_BEFORE times, its params and its checkpoint."""
    optimizer, params = _distributed_optimizer(case)
    for grads in GRADS[:STEPS_BEFORE]:
        step(optimizer, params, grads)
    return optimizer, params, save(_sharded_state_dict(optimizer, params, metadata))


def _resumed(case, checkpoint, metadata, load):
    """A fresh optimizer and its params, loaded from `checkpoint` as load_checkpoint loads a
    distributed checkpoint: one load of the model's and the optimizer's sharded state dicts
    (which fills the model params in place), then the optimizer's load_state_dict."""
    optimizer, params = _distributed_optimizer(case)
    to_load = _sharded_state_dict(optimizer, params, metadata, is_loading=True)
    optimizer.load_state_dict(load(to_load, checkpoint)["optimizer"])
    return optimizer, params


def _skip_without_fused_adam(case):
    # Without TE the accelerator side is torch's AdamW, whose per-parameter step the host cases
    # cover; its load also meets the hybrid optimizer moving a torch AdamW's state to the host.
    if case in ("hybrid-mixed", "hybrid-accelerator") and not HAVE_TE:
        pytest.skip("Transformer Engine's FusedAdam is not available")


def _step_counts(optimizer):
    """The step counts of the inner optimizer, or of each hybrid sub-optimizer: per param group
    (FusedAdam) and per parameter (torch's AdamW)."""
    inner = optimizer.optimizer
    return [
        (
            type(sub_optimizer).__name__,
            [group.get("step") for group in sub_optimizer.param_groups],
            [float(state["step"]) for state in sub_optimizer.state.values() if "step" in state],
        )
        for sub_optimizer in getattr(inner, "sub_optimizers", [inner])
    ]


@pytest.mark.parametrize("case,sharding_type,storage", CASES)
def test_distributed_checkpoint_resume_equals_no_interruption(
    case, sharding_type, storage, tmp_path
):
    _skip_without_fused_adam(case)
    save, load = _storage(storage, tmp_path)
    metadata = {"distrib_optim_sharding_type": sharding_type}
    uninterrupted, uninterrupted_params, checkpoint = _checkpoint_after_steps(
        case, metadata, save
    )
    resumed, resumed_params = _resumed(case, checkpoint, metadata, load)
    for grads in GRADS[STEPS_BEFORE:]:
        step(uninterrupted, uninterrupted_params, grads)
        step(resumed, resumed_params, grads)

    got = _param_states(resumed, resumed_params)
    want = _param_states(uninterrupted, uninterrupted_params)
    steps = f"steps {_step_counts(resumed)} after resuming, {_step_counts(uninterrupted)} without"
    for index, (got_state, want_state) in enumerate(zip(got, want)):
        assert want_state.keys() <= got_state.keys(), f"param {index}: {got_state.keys()}"
        for key, value in want_state.items():
            assert torch.equal(got_state[key], value), (
                f"param {index}: {key} {got_state[key].flatten().tolist()} after resuming, "
                f"{value.flatten().tolist()} without the interruption ({steps})"
            )
