"""The hybrid optimizer must load a state dict saved before its first step.

The load_state_dict post-hook (param_update_in_fp32, which the factory always sets) rebuilds
`self.state` as a plain dict from what was loaded, then `_sync_hdo_state_to_sub_optimizers` reads
`self.state[orig_param]` for every parameter of every sub-optimizer. A state dict saved before the
first step (a checkpoint at iteration 0) has no state entries, so the lookup raises KeyError.
"""

import copy

import pytest
import torch
from torch.optim import AdamW

from megatron.core.optimizer.cpu_offloading import HybridDeviceOptimizer

try:
    from transformer_engine.pytorch.optimizers import FusedAdam as GPUAdam
except ImportError:
    from torch.optim import AdamW as GPUAdam


def _hybrid_optimizer(param, offload_fraction):
    return HybridDeviceOptimizer(
        [param],
        offload_fraction=offload_fraction,
        cpu_optimizer_cls=AdamW,
        gpu_optimizer_cls=GPUAdam,
        param_update_in_fp32=True,
        overlap_cpu_optimizer_d2h_h2d=False,
        lr=1e-3,
        weight_decay=0.0,
    )


def _bf16_param():
    return torch.nn.Parameter(torch.full((14,), 0.5, dtype=torch.bfloat16, device="cuda"))


@pytest.mark.parametrize("offload_fraction", [1.0, 0.0])
def test_load_state_dict_saved_before_the_first_step(offload_fraction):
    fresh_param = _bf16_param()
    fresh = _hybrid_optimizer(fresh_param, offload_fraction)
    checkpoint = copy.deepcopy(fresh.state_dict())
    assert len(checkpoint["state"]) == 0

    loaded_param = _bf16_param()
    loaded = _hybrid_optimizer(loaded_param, offload_fraction)
    try:
        loaded.load_state_dict(checkpoint)
    except KeyError:
        pytest.fail(
            "load_state_dict of a state dict saved before any step raised KeyError "
            "(a parameter without saved state)"
        )

    # The loaded optimizer steps as the fresh one does.
    grad = torch.linspace(-1.0, 1.0, 14).cuda().bfloat16()
    for hdo, param in ((fresh, fresh_param), (loaded, loaded_param)):
        param.decoupled_grad = grad
        hdo.step()
    assert torch.equal(
        loaded.param_to_fp32_param[loaded_param], fresh.param_to_fp32_param[fresh_param]
    ), "after one step the loaded optimizer's fp32 master differs from a fresh optimizer's"
    assert torch.equal(loaded_param, fresh_param)
