"""Gathered parameter state must round-trip TE FusedAdam's bf16 param remainders.

With the precision-aware optimizer and `store_param_remainders` (the default from TE 2.1), TE's
FusedAdam keeps, for each bf16 param, only the low 16 bits of its fp32 master, as an int16
`master_param`. `get_parameter_state_dp_zero` takes that int16 tensor from
`get_unscaled_state` and copies it into the fp32 world tensor of main params, so the remainder's
integer value is saved where the fp32 master belongs. On load,
`load_parameter_state_from_dp_zero` hands the fp32 slice to
`set_scaled_state(param, "master_param", ...)`, which asserts an int16 tensor for such a param:
the load raises AssertionError. The same world tensors serve the `dp_zero_gather_scatter` and
`fully_reshardable` distributed checkpoints and torch-format checkpoints.
"""

import copy

import pytest
import torch

from megatron.core.distributed.distributed_data_parallel_config import (
    DistributedDataParallelConfig,
)
from megatron.core.distributed.param_and_grad_buffer import (
    _ParamAndGradBuffer,
    group_params_for_buffers,
    partition_buckets,
)
from megatron.core.optimizer import OptimizerConfig, _get_megatron_optimizer_based_on_param_groups
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
from megatron.core.process_groups_config import ProcessGroupCollection

try:
    from transformer_engine.pytorch.optimizers import FusedAdam  # noqa: F401

    HAVE_TE = True
except ImportError:
    HAVE_TE = False

SHAPES = [(4,), (2, 3)]
GRADS = [[1.0, -2.0, 0.5, 0.25], [-0.5, 1.0, 0.75, -1.0, 0.25, 2.0]]
STEPS = 3


def _one_rank_groups():
    """A data-parallel group of this rank alone and its gloo twin. Every rank creates the
    one-rank groups of all ranks, as new_group requires."""
    if not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(
            backend, store=torch.distributed.HashStore(), rank=0, world_size=1
        )
    mine = None
    for rank in range(torch.distributed.get_world_size()):
        groups = (
            torch.distributed.new_group([rank]),
            torch.distributed.new_group([rank], backend="gloo"),
        )
        if rank == torch.distributed.get_rank():
            mine = groups
    return mine


class _ModelChunk:
    """What DistributedOptimizer reads of a DistributedDataParallel model chunk: the config, the
    param and grad buffers and the bucket groups, built as DistributedDataParallel.__init__
    builds them for a data-parallel group of one rank."""

    def __init__(self, params, ddp_config, dp_group):
        if not ddp_config.overlap_grad_reduce:
            ddp_config.bucket_size = None
        layout = DistributedOptimizer.compute_full_param_layout(
            params, ddp_config.bucket_size, 1, ddp_config, expert_data_parallel_world_size=1
        )
        names = {param: f"param{i}" for i, param in enumerate(params)}
        pg_collection = ProcessGroupCollection(tp=dp_group, dp_cp=dp_group)
        self.ddp_config = ddp_config
        self.buffers = []
        groups = group_params_for_buffers(params, ddp_config.grad_reduce_in_fp32)
        for key, (in_buffer, param_indices) in groups.items():
            buffer = _ParamAndGradBuffer(
                ddp_config,
                key.param_dtype,
                key.grad_dtype,
                [(param, names[param]) for param in in_buffer],
                dp_group,
                ddp_config.bucket_size,
                names,
                1.0,
                param_indices,
                ddp_config.nccl_ub,
                pg_collection,
                param_layout=layout.layouts[key],
            )
            self.buffers.append(buffer)
        self.expert_parallel_buffers = []
        self.bucket_groups = partition_buckets(self.buffers)
        self.expert_parallel_bucket_groups = []

    def _start_bucket_group_param_sync(self, bucket_group, force_sync=False):
        """With one data-parallel rank the param all-gather has nothing to gather."""


def _distributed_optimizer():
    """A bf16 model's precision-aware DistributedOptimizer over TE's FusedAdam (no offload),
    built by the optimizer factory with Megatron's default store_param_remainders."""
    dp_group, dp_group_gloo = _one_rank_groups()
    params = [
        torch.nn.Parameter(torch.full(shape, 0.5, dtype=torch.bfloat16, device="cuda"))
        for shape in SHAPES
    ]
    ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=True)
    chunk = _ModelChunk(params, ddp_config, dp_group)
    config = OptimizerConfig(
        optimizer="adam",
        lr=1e-3,
        bf16=True,
        use_distributed_optimizer=True,
        use_precision_aware_optimizer=True,
    )
    param_groups = [
        {
            "params": params,
            "wd_mult": 1.0,
            "lr_mult": 1.0,
            "is_expert_parallel": False,
            "is_decoupled_lr": False,
        }
    ]
    optimizer = _get_megatron_optimizer_based_on_param_groups(
        config,
        [chunk],
        param_groups,
        per_model_buffers={0: chunk.buffers},
        data_parallel_group=dp_group,
        data_parallel_group_gloo=dp_group_gloo,
        data_parallel_group_idx=0,
        intra_dist_opt_group=dp_group,
        pg_collection=ProcessGroupCollection(tp=dp_group, dp_cp=dp_group),
    )
    return optimizer, params


def _step(optimizer, params):
    for param, grad in zip(params, GRADS):
        param.main_grad.copy_(torch.tensor(grad).view(param.shape))
    optimizer.step()
    optimizer.zero_grad()


def _fused_adam_state(optimizer, params):
    """Per model param: its bf16 values and TE FusedAdam's state of its shard, on the host."""
    fused_adam = optimizer.optimizer
    states = []
    for param in params:
        group_index, group_order = optimizer.model_param_group_index_map[param]
        shard = fused_adam.param_groups[group_index]["params"][group_order]
        state = {k: v.detach().cpu().clone() for k, v in fused_adam.state[shard].items()}
        state["bf16_param"] = param.detach().cpu().clone()
        states.append(state)
    return states


@pytest.mark.skipif(not HAVE_TE, reason="Transformer Engine's FusedAdam is not available")
def test_dp_zero_round_trip_keeps_param_remainders():
    saving, saving_params = _distributed_optimizer()
    if not saving.config.store_param_remainders:
        pytest.skip("this Transformer Engine keeps no param remainders (TE < 2.1)")
    for _ in range(STEPS):
        _step(saving, saving_params)
    saved = _fused_adam_state(saving, saving_params)
    assert saved[0]["master_param"].dtype == torch.int16
    # A torch-format checkpoint: the common state dict and the gathered parameter state.
    common = copy.deepcopy(saving.state_dict())
    param_state = copy.deepcopy(saving.get_parameter_state_dp_zero())

    loading, loading_params = _distributed_optimizer()
    with torch.no_grad():
        for loading_param, saving_param in zip(loading_params, saving_params):
            loading_param.copy_(saving_param)
    loading.load_state_dict(common)
    try:
        loading.load_parameter_state_from_dp_zero(param_state)
    except AssertionError:
        pytest.fail(
            "load_parameter_state_from_dp_zero raised AssertionError: the gathered state "
            "holds the int16 param remainders as fp32 master params"
        )

    loaded = _fused_adam_state(loading, loading_params)
    for index, (got, want) in enumerate(zip(loaded, saved)):
        for key, value in want.items():
            assert torch.equal(got[key], value), (
                f"param {index}: {key} {got[key].flatten().tolist()} after the load, "
                f"{value.flatten().tolist()} saved"
            )
