"""The hybrid optimizer must step a native fp32 parameter that stays on the accelerator.

With the precision-aware optimizer (required by --optimizer-cpu-offload), DistributedOptimizer
hands every shard its gradient as `decoupled_grad` and never sets `.grad`.
`HybridDeviceOptimizer._set_sub_optimizer_grads` reads `decoupled_grad` for the host copies and
for the fp32 copies of 16-bit parameters, but an fp32 parameter that is not offloaded has neither:
the accelerator sub-optimizer steps it in place, reads `.grad` (None) and skips it, so the
parameter keeps its initial value and its moments stay zero.
"""

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
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.999)
EPS = 1e-8


def _gpu_optimizer_cls(name):
    if name == "te_fused_adam":
        if not HAVE_TE:
            pytest.skip("Transformer Engine's FusedAdam is not available")
        return FusedAdam
    return AdamW


@pytest.mark.parametrize("gpu_optimizer", ["te_fused_adam", "torch_adamw"])
def test_fp32_param_on_accelerator_is_stepped_from_decoupled_grad(gpu_optimizer):
    gpu_optimizer_cls = _gpu_optimizer_cls(gpu_optimizer)
    initial = torch.tensor([0.5, -0.25, 1.0, 2.0])
    # A bf16 model with one parameter kept in fp32 (as mark_keep_in_fp32 keeps it).
    bf16_param = torch.nn.Parameter(torch.full((4,), 0.5, dtype=torch.bfloat16, device="cuda"))
    fp32_param = torch.nn.Parameter(initial.clone().cuda())
    hdo = HybridDeviceOptimizer(
        [bf16_param, fp32_param],
        offload_fraction=0.0,
        cpu_optimizer_cls=AdamW,
        gpu_optimizer_cls=gpu_optimizer_cls,
        param_update_in_fp32=True,
        overlap_cpu_optimizer_d2h_h2d=False,
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        betas=BETAS,
        eps=EPS,
    )
    # As DistributedOptimizer hands the gradients to a precision-aware inner optimizer.
    grad = torch.tensor([1.0, -2.0, 0.5, 0.0])
    bf16_param.decoupled_grad = grad.cuda().bfloat16()
    fp32_param.decoupled_grad = grad.cuda()
    hdo.step()

    # The same optimizer class stepping the same values from `.grad`.
    reference = torch.nn.Parameter(initial.clone().cuda())
    reference.grad = grad.cuda()
    ref_optimizer = gpu_optimizer_cls(
        [reference], lr=LR, weight_decay=WEIGHT_DECAY, betas=BETAS, eps=EPS
    )
    ref_optimizer.step()

    assert not torch.equal(hdo.param_to_fp32_param[bf16_param].cpu(), torch.full((4,), 0.5)), (
        "the fp32 copy of the bf16 parameter did not move"
    )
    assert not torch.equal(fp32_param.detach().cpu(), initial), (
        f"the fp32 parameter on the accelerator kept its initial value {initial.tolist()} "
        "after a step with a non-zero gradient"
    )
    assert torch.equal(fp32_param.detach(), reference.detach()), (
        f"fp32 parameter {fp32_param.detach().cpu().tolist()}, expected "
        f"{reference.detach().cpu().tolist()} ({gpu_optimizer_cls.__name__} on the same gradient)"
    )
    # A first AdamW step: m_hat = g, v_hat = g * g, the update lr * (g / (|g| + eps) + wd * p).
    first_step = initial - LR * (grad / (grad.abs() + EPS) + WEIGHT_DECAY * initial)
    torch.testing.assert_close(fp32_param.detach().cpu(), first_step)
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(hdo.state[fp32_param][key], ref_optimizer.state[reference][key]), (
            f"{key} of the fp32 parameter is {hdo.state[fp32_param][key].cpu().tolist()}, "
            f"expected {ref_optimizer.state[reference][key].cpu().tolist()}"
        )
