"""Resuming the hybrid optimizer must keep the accelerator FusedAdam's step count.

Transformer Engine's FusedAdam counts steps per param group (`group["step"]`) and keeps no step in
the per-parameter state. The hybrid optimizer's state dict carries only the per-parameter state,
and its load_state_dict post-hook rebuilds the sub-optimizers: the new FusedAdam starts at step 0,
so the first step after a resume uses the bias corrections of step 1 on moments that are several
steps old, and the update of every parameter on the accelerator is too large.
"""

import copy

import pytest
import torch
from torch.optim import AdamW

from megatron.core.optimizer.cpu_offloading import HybridDeviceOptimizer

try:
    from transformer_engine.pytorch.optimizers import FusedAdam

    HAVE_TE = True
except ImportError:
    HAVE_TE = False

LR = 1e-3
NUMEL = 4
GRADS = [
    torch.tensor([1.0, -2.0, 0.5, 0.25]),
    torch.tensor([-0.5, 1.0, 0.75, -1.0]),
    torch.tensor([0.25, 0.5, -2.0, 1.5]),
]


def _hybrid_optimizer(param):
    """The hybrid optimizer as the factory builds it; nothing offloaded."""
    return HybridDeviceOptimizer(
        [param],
        offload_fraction=0.0,
        cpu_optimizer_cls=AdamW,
        gpu_optimizer_cls=FusedAdam,
        param_update_in_fp32=True,
        overlap_cpu_optimizer_d2h_h2d=False,
        lr=LR,
        weight_decay=0.0,
    )


def _step(hdo, param, grad):
    # As DistributedOptimizer hands the gradient to a precision-aware inner optimizer.
    param.decoupled_grad = grad.cuda().bfloat16()
    hdo.step()
    hdo.zero_grad()


def _bf16_param():
    return torch.nn.Parameter(torch.full((NUMEL,), 0.5, dtype=torch.bfloat16, device="cuda"))


@pytest.mark.skipif(not HAVE_TE, reason="Transformer Engine's FusedAdam is not available")
def test_resume_keeps_the_fused_adam_step_count():
    uninterrupted_param = _bf16_param()
    uninterrupted = _hybrid_optimizer(uninterrupted_param)
    for grad in GRADS:
        _step(uninterrupted, uninterrupted_param, grad)

    first_param = _bf16_param()
    first = _hybrid_optimizer(first_param)
    _step(first, first_param, GRADS[0])
    checkpoint = copy.deepcopy(first.state_dict())
    # Resume: the model weights, then the optimizer state into a fresh optimizer.
    resumed_param = torch.nn.Parameter(first_param.detach().clone())
    resumed = _hybrid_optimizer(resumed_param)
    resumed.load_state_dict(checkpoint)

    saved_steps = [group["step"] for group in first.gpu_optimizer.param_groups]
    loaded_steps = [group.get("step", 0) for group in resumed.gpu_optimizer.param_groups]
    assert [int(s) for s in loaded_steps] == [int(s) for s in saved_steps] == [1], (
        f"the accelerator FusedAdam resumes at step {loaded_steps}; {saved_steps} were taken "
        "before the checkpoint"
    )

    for grad in GRADS[1:]:
        _step(resumed, resumed_param, grad)
    resumed_master = resumed.param_to_fp32_param[resumed_param]
    uninterrupted_master = uninterrupted.param_to_fp32_param[uninterrupted_param]
    assert torch.equal(resumed_master, uninterrupted_master), (
        f"fp32 master after resuming {resumed_master.cpu().tolist()}, without the interruption "
        f"{uninterrupted_master.cpu().tolist()}"
    )
    assert torch.equal(resumed_param, uninterrupted_param), "bf16 parameters differ"
