"""Loading the hybrid optimizer's state must leave the accelerator sub-optimizer's state on it.

Without Transformer Engine and Apex, Megatron's factory makes both sub-optimizer classes
torch.optim.AdamW. After load_state_dict, `_move_new_state_to_right_device` sends a
sub-optimizer's state to the host when `isinstance(optimizer, cpu_optimizer_cls)`: the accelerator
AdamW is such an instance too, so its moments move to the host while its parameters stay on the
accelerator, and its next step mixes devices. The factory passes `fused=True` (for the host
AdamW) to both: from PyTorch 2.0 on, torch's AdamW reads that group key, so that step is one
`torch._fused_adamw_` over tensors on two devices, and it raises there.
"""

import copy

import torch
from torch.optim import AdamW

from megatron.core.optimizer.cpu_offloading import HybridDeviceOptimizer

LR = 1e-3
GRADS = [torch.tensor([1.0, -2.0, 0.5, 0.25]), torch.tensor([-0.5, 1.0, 0.75, -1.0])]


def _hybrid_optimizer(param):
    """As the factory builds it without TE or Apex (both classes AdamW, with the factory's
    `bias_correction` and `fused` keys); nothing offloaded."""
    return HybridDeviceOptimizer(
        [param],
        offload_fraction=0.0,
        cpu_optimizer_cls=AdamW,
        gpu_optimizer_cls=AdamW,
        param_update_in_fp32=True,
        overlap_cpu_optimizer_d2h_h2d=True,
        lr=LR,
        weight_decay=0.0,
        bias_correction=True,
        fused=True,
    )


def _step(hdo, param, grad):
    param.decoupled_grad = grad.cuda().bfloat16()
    hdo.step()
    hdo.zero_grad()


def _bf16_param():
    return torch.nn.Parameter(torch.full((4,), 0.5, dtype=torch.bfloat16, device="cuda"))


def test_loaded_accelerator_state_stays_on_the_accelerator():
    uninterrupted_param = _bf16_param()
    uninterrupted = _hybrid_optimizer(uninterrupted_param)
    for grad in GRADS:
        _step(uninterrupted, uninterrupted_param, grad)

    first_param = _bf16_param()
    first = _hybrid_optimizer(first_param)
    _step(first, first_param, GRADS[0])
    checkpoint = copy.deepcopy(first.state_dict())
    resumed_param = torch.nn.Parameter(first_param.detach().clone())
    resumed = _hybrid_optimizer(resumed_param)
    resumed.load_state_dict(checkpoint)

    assert resumed.gpu_optimizer is not None and not resumed.cpu_optimizers
    fp32_param = resumed.param_to_fp32_param[resumed_param]
    assert fp32_param.is_cuda
    for key in ("exp_avg", "exp_avg_sq"):
        value = resumed.gpu_optimizer.state[fp32_param][key]
        assert value.is_cuda, (
            f"after load_state_dict the accelerator AdamW's {key} is on {value.device}, "
            f"its parameter on {fp32_param.device}"
        )

    _step(resumed, resumed_param, GRADS[1])
    resumed_master = resumed.param_to_fp32_param[resumed_param]
    uninterrupted_master = uninterrupted.param_to_fp32_param[uninterrupted_param]
    assert torch.equal(resumed_master, uninterrupted_master), (
        f"fp32 master after resuming {resumed_master.cpu().tolist()}, without the interruption "
        f"{uninterrupted_master.cpu().tolist()}"
    )
