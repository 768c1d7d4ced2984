"""Loading gathered parameter state must reach the hybrid optimizer's sub-optimizers.

`load_parameter_state_from_dp_zero` (the `dp_zero_gather_scatter` distributed checkpoint, and
`load_parameter_state` of torch-format checkpoints) hands each shard's tensors to
`_set_main_param_and_optimizer_states`, which, for a HybridDeviceOptimizer, assigns them into
`hdo.state`. Unlike `load_parameter_state_from_fully_reshardable` and
`load_parameter_state_from_fs_model_space`, it does not then call
`_sync_hdo_state_to_sub_optimizers()`. The fp32 copies that the sub-optimizers step keep the
values they had before (after a fresh load, those of the dummy step in `load_state_dict`), so the
loaded master params are ignored. The loaded moments reach the sub-optimizers only because their
per-param state dicts are those of `hdo.state`, and they stay on the host, also for the
accelerator's sub-optimizer.
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

SHAPES = [(4,), (2, 3)]
GRADS = [[1.0, -2.0, 0.5, 0.25], [-0.5, 1.0, 0.75, -1.0, 0.25, 2.0]]
# Three steps move every master further than the dummy step that load_state_dict takes on a
# fresh hybrid optimizer.
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


def _distributed_optimizer(offload_fraction):
    """A bf16 model's DistributedOptimizer over the hybrid optimizer (precision-aware, as
    --optimizer-cpu-offload requires), built by the optimizer factory."""
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
        optimizer_cpu_offload=True,
        optimizer_offload_fraction=offload_fraction,
        overlap_cpu_optimizer_d2h_h2d=False,
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


def _sub_optimizer_state(optimizer, params):
    """Per model param, on the host: the fp32 copy that one of the hybrid optimizer's
    sub-optimizers steps, as "param", and that sub-optimizer's moments for it."""
    hdo = optimizer.optimizer
    states = []
    for param in params:
        group_index, group_order = optimizer.model_param_group_index_map[param]
        shard = hdo.param_groups[group_index]["params"][group_order]
        inner = hdo.param_to_inner_param[shard]
        sub_optimizer = next(o for o in hdo.sub_optimizers if inner in o.state)
        state = {k: sub_optimizer.state[inner][k] for k in ("exp_avg", "exp_avg_sq")}
        state["param"] = inner
        states.append({k: v.detach().cpu().clone() for k, v in state.items()})
    return states


@pytest.mark.parametrize("offload_fraction", [1.0, 0.0])
def test_dp_zero_round_trip_reaches_the_sub_optimizers(offload_fraction):
    saving, saving_params = _distributed_optimizer(offload_fraction)
    for _ in range(STEPS):
        _step(saving, saving_params)
    saved = _sub_optimizer_state(saving, saving_params)
    # A torch-format checkpoint: the common state dict and the gathered parameter state.
    common = copy.deepcopy(saving.state_dict())
    param_state = copy.deepcopy(saving.get_parameter_state_dp_zero())

    loading, loading_params = _distributed_optimizer(offload_fraction)
    with torch.no_grad():
        for loading_param, saving_param in zip(loading_params, saving_params):
            loading_param.copy_(saving_param)
    loading.load_state_dict(common)
    loading.load_parameter_state_from_dp_zero(param_state)

    loaded = _sub_optimizer_state(loading, loading_params)
    for index, (got, want) in enumerate(zip(loaded, saved)):
        for key, value in want.items():
            assert torch.equal(got[key], value), (
                f"param {index}: the sub-optimizer steps from {key} "
                f"{got[key].flatten().tolist()} after the load, {value.flatten().tolist()} saved"
            )
