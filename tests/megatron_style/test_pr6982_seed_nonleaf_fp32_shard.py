"""DistributedOptimizer must hand the hybrid optimizer a leaf shard of an fp32 model parameter.

`_build_model_and_main_param_groups` sliced fp32 model parameters without `detach()`, so the shard
was an autograd view (a non-leaf tensor). With `optimizer_cpu_offload`, DistributedOptimizer then
rebuilds the HybridDeviceOptimizer over the shards, and torch.optim rejects the view:
`ValueError: can't optimize a non-leaf Tensor` (issue #6212, fixed by PR #6982).

The test runs DistributedOptimizer.__init__'s own steps for one rank that owns the whole
parameter (a data-parallel world of one, one bucket), without a grad buffer.
"""

import pytest
import torch
from torch.optim import AdamW

try:
    from transformer_engine.pytorch.optimizers import FusedAdam as GPUAdam
except ImportError:
    from torch.optim import AdamW as GPUAdam

from megatron.core.optimizer import OptimizerConfig
from megatron.core.optimizer.cpu_offloading import HybridDeviceOptimizer
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer, Range

LR = 1e-3
NUMEL = 4


def _shards_as_distributed_optimizer_builds_them(param_groups, config):
    """DistributedOptimizer.__init__ for a rank owning all of each parameter: the range maps, the
    optimizer group ranges and the main param groups. Returns (opt_group_ranges, shard groups)."""
    params = [p for group in param_groups for p in group["params"]]
    world_index_map, offset = {}, 0
    for param in params:
        world_index_map[param] = (offset, offset + param.numel(), 0)
        offset += param.numel()
    param_map = DistributedOptimizer._build_model_gbuf_param_range_map(
        world_index_map, Range(0, offset), 0
    )
    gbuf_ranges = [{(torch.float32, torch.float32): [{"param_map": param_map}]}]
    param_gbuf_map = DistributedOptimizer._build_model_param_gbuf_map(gbuf_ranges)
    _, opt_group_ranges = DistributedOptimizer._build_optimizer_group_ranges(
        param_groups, gbuf_ranges
    )
    groups = DistributedOptimizer._build_model_and_main_param_groups(
        gbuf_ranges, param_gbuf_map, opt_group_ranges, config
    )
    shard_fp32_groups = groups[3]
    return opt_group_ranges, shard_fp32_groups


@pytest.mark.parametrize("use_precision_aware_optimizer", [True, False])
def test_fp32_shard_is_a_leaf_the_hybrid_optimizer_accepts(use_precision_aware_optimizer):
    config = OptimizerConfig(
        optimizer="adam",
        lr=LR,
        bf16=True,
        use_distributed_optimizer=True,
        use_precision_aware_optimizer=use_precision_aware_optimizer,
        optimizer_cpu_offload=True,
        optimizer_offload_fraction=1.0,
    )
    model_param = torch.nn.Parameter(torch.full((NUMEL,), 0.5, device="cuda"))
    param_groups = [
        {"params": [model_param], "wd_mult": 1.0, "lr_mult": 1.0, "is_expert_parallel": False}
    ]
    # The inner optimizer as the factory builds it for optimizer_cpu_offload.
    hdo = HybridDeviceOptimizer(
        param_groups,
        offload_fraction=config.optimizer_offload_fraction,
        cpu_optimizer_cls=AdamW,
        gpu_optimizer_cls=GPUAdam,
        param_update_in_fp32=True,
        overlap_cpu_optimizer_d2h_h2d=False,
        lr=LR,
        weight_decay=0.0,
    )

    opt_group_ranges, shard_fp32_groups = _shards_as_distributed_optimizer_builds_them(
        hdo.param_groups, config
    )
    shard = shard_fp32_groups[0][0]
    assert shard.is_leaf and not shard.requires_grad, (
        f"the fp32 shard is an autograd view of the model parameter (is_leaf={shard.is_leaf}, "
        f"grad_fn={type(shard.grad_fn).__name__}); torch.optim rejects it"
    )
    assert shard.data_ptr() == model_param.data_ptr(), "the shard must alias the model parameter"

    # DistributedOptimizer.__init__ rebuilds the hybrid optimizer over the shards.
    hdo = HybridDeviceOptimizer(
        params=[g["orig_group"] for g in opt_group_ranges], **hdo.defaults
    )

    # One step through the rebuilt optimizer updates the model parameter (offloaded: host AdamW).
    grad = torch.tensor([1.0, -2.0, 0.25, 0.0], device="cuda")
    if config.use_precision_aware_optimizer_no_fp8_or_ds_fp8:
        shard.decoupled_grad = grad  # as DistributedOptimizer hands it over
    else:
        shard.grad = grad
    hdo.step()
    reference = torch.full((NUMEL,), 0.5)
    reference.grad = grad.cpu()
    AdamW([reference], lr=LR, weight_decay=0.0).step()
    assert torch.equal(model_param.detach().cpu(), reference), (
        f"model parameter {model_param.detach().cpu().tolist()} after one step, "
        f"expected {reference.tolist()} (host AdamW on the same gradient)"
    )
