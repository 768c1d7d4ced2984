"""After load_state_dict, the hybrid optimizer's state dict must carry the live fp32 masters.

After every step, `_sync_sub_optimizers_state_to_hdo` points each state entry's `master_param` at
the tensor the sub-optimizer steps (the fp32 copy). load_state_dict instead leaves the loaded
tensor there: the post-hook copies it into the new fp32 copies, but the two stay separate tensors
until the next step. A change of the fp32 copies in between (update_fp32_param_by_new_param,
which DistributedOptimizer.reload_model_params calls) is missing from a state dict saved before
that step: the checkpoint carries the master as it was loaded.
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

RELOADED = 0.75


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


@pytest.mark.parametrize("offload_fraction", [1.0, 0.0])
def test_state_dict_after_load_and_reload_carries_the_reloaded_master(offload_fraction):
    param = torch.nn.Parameter(torch.full((4,), 0.5, dtype=torch.bfloat16, device="cuda"))
    hdo = _hybrid_optimizer(param, offload_fraction)
    param.decoupled_grad = torch.tensor([1.0, -2.0, 0.5, 0.25], device="cuda").bfloat16()
    hdo.step()
    checkpoint = copy.deepcopy(hdo.state_dict())

    # Load the checkpoint into a fresh optimizer, then reload other model weights (as
    # DistributedOptimizer.reload_model_params does for the hybrid optimizer) and save again.
    loaded_param = torch.nn.Parameter(param.detach().clone())
    loaded = _hybrid_optimizer(loaded_param, offload_fraction)
    loaded.load_state_dict(checkpoint)
    with torch.no_grad():
        loaded_param.fill_(RELOADED)
    loaded.update_fp32_param_by_new_param()
    assert torch.equal(
        loaded.param_to_fp32_param[loaded_param].cpu(), torch.full((4,), RELOADED)
    ), "update_fp32_param_by_new_param did not refresh the fp32 copy"

    saved_master = loaded.state_dict()["state"][0]["master_param"]
    assert torch.equal(saved_master.cpu(), torch.full((4,), RELOADED)), (
        f"the state dict saves master_param {saved_master.cpu().tolist()}; the optimizer's fp32 "
        f"master after the reload is {RELOADED}"
    )
