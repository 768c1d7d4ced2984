"""Reloading model params into the hybrid optimizer must refresh the host copies of fp32 params.

When model weights are loaded after the optimizer is built (--no-load-optim, --finetune),
`DistributedOptimizer.reload_model_params()` propagates them to the hybrid optimizer by calling
`HybridDeviceOptimizer.update_fp32_param_by_new_param()`, and nothing else. That method refreshes
only the fp32 copies of 16-bit parameters. An offloaded fp32 parameter has a host copy instead,
which keeps its value from construction; the next step computes from it and the copy-back writes
the result over the loaded weight.
"""

import pytest
import torch
from torch.optim import AdamW

from megatron.core.optimizer.cpu_offloading import HybridDeviceOptimizer

try:
    from transformer_engine.pytorch.optimizers import FusedAdam as GPUAdam
except ImportError:
    from torch.optim import AdamW as GPUAdam

LOADED = 0.75


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reloaded_weights_survive_the_next_step(dtype):
    param = torch.nn.Parameter(torch.ones(4, dtype=dtype, device="cuda"))
    hdo = HybridDeviceOptimizer(
        [param],
        offload_fraction=1.0,
        cpu_optimizer_cls=AdamW,
        gpu_optimizer_cls=GPUAdam,
        param_update_in_fp32=True,
        overlap_cpu_optimizer_d2h_h2d=False,
        lr=1e-3,
        weight_decay=0.0,
    )
    # Model weights loaded after the optimizer was built, then reload_model_params().
    with torch.no_grad():
        param.fill_(LOADED)
    hdo.update_fp32_param_by_new_param()

    # A step that changes nothing: lr 0 and a zero gradient.
    for group in hdo.param_groups:
        group["lr"] = 0.0
    param.decoupled_grad = torch.zeros(4, dtype=dtype, device="cuda")
    hdo.step()

    expected = torch.full((4,), LOADED, dtype=dtype)
    assert torch.equal(param.detach().cpu(), expected), (
        f"{dtype} weights {param.detach().cpu().tolist()} after reload and a zero-lr step, "
        f"expected the loaded {LOADED}"
    )
