"""A DistributedOptimizer at data-parallel size 1, for the checkpoint tests of this folder
(test_f5, test_f7, test_f8, test_f9, test_f14): one-rank process groups, the parts of a
DistributedDataParallel model chunk the optimizer reads, the optimizer built by Megatron's
factory, the hybrid optimizer's config, and a step. Copy it with those tests.
"""

import importlib.util

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


def one_rank_groups():
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


class ModelChunk:
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


def bf16_params(shapes):
    """Model params of `shapes` on the accelerator, every element 0.5 in bf16."""
    return [
        torch.nn.Parameter(torch.full(shape, 0.5, dtype=torch.bfloat16, device="cuda"))
        for shape in shapes
    ]


def offload_config(offload_fraction, lr=1e-3):
    """--optimizer-cpu-offload for a bf16 model: the hybrid optimizer, precision-aware (as that
    flag requires), without overlapping its host copies."""
    return OptimizerConfig(
        optimizer="adam",
        lr=lr,
        bf16=True,
        use_distributed_optimizer=True,
        use_precision_aware_optimizer=True,
        optimizer_cpu_offload=True,
        optimizer_offload_fraction=offload_fraction,
        overlap_cpu_optimizer_d2h_h2d=False,
    )


def distributed_optimizer(config, params, ddp_config=None):
    """The DistributedOptimizer of `config` over `params` (one param group) at data-parallel
    size 1, built by Megatron's optimizer factory, and the model chunk it reads."""
    dp_group, dp_group_gloo = one_rank_groups()
    if ddp_config is None:
        ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=True)
    chunk = ModelChunk(params, ddp_config, dp_group)
    param_group = {"params": params, "wd_mult": 1.0, "lr_mult": 1.0,
                   "is_expert_parallel": False, "is_decoupled_lr": False}
    optimizer = _get_megatron_optimizer_based_on_param_groups(
        config,
        [chunk],
        [param_group],
        per_model_buffers={0: chunk.buffers},
        data_parallel_group=dp_group,
        data_parallel_group_gloo=dp_group_gloo,
        data_parallel_group_idx=0,
        intra_dist_opt_group=dp_group,
        pg_collection=ProcessGroupCollection(tp=dp_group, dp_cp=dp_group),
    )
    return optimizer, chunk


def step(optimizer, params, grads):
    """One optimizer step with `grads` (a flat list per param) as the params' main grads."""
    for param, grad in zip(params, grads):
        param.main_grad.copy_(torch.tensor(grad).view(param.shape))
    optimizer.step()
    optimizer.zero_grad()


def skip_without_torch_dist_writer():
    """Skips a test that saves with dist_checkpointing's torch_dist strategy where Megatron's
    writer cannot run: strategies/filesystem_async.py needs psutil."""
    if importlib.util.find_spec("psutil") is None:
        pytest.skip("Megatron's torch_dist writer (strategies/filesystem_async.py) needs psutil")
