"""A DistributedOptimizer's surroundings at data-parallel size 1, for the checkpoint tests of this
folder (test_f5, test_f7, test_f8, test_f9): one-rank process groups and the parts of a
DistributedDataParallel model chunk the optimizer reads. Copy it with those tests.
"""

import torch

from megatron.core.distributed.param_and_grad_buffer import (
    _ParamAndGradBuffer,
    group_params_for_buffers,
    partition_buckets,
)
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
