"""Clipping must accept the fp16 decoupled grads of the precision-aware optimizer.

With the precision-aware optimizer, DistributedOptimizer hands each shard its grad as
`decoupled_grad`, a view of the grad buffer in the buffer's dtype: fp16 with --fp16 and without
--accumulate-allreduce-grads-in-fp32. `clip_grad_norm` computes the norm over those grads, then
`clip_grad_by_total_norm_fp32` asserts `decoupled_grad.dtype in [torch.float32, torch.bfloat16]`
(with no message), so the first clipped step raises a bare AssertionError.
"""

import pytest
import torch

from megatron.core.optimizer.clip_grads import clip_grad_by_total_norm_fp32

GRAD = [1.0, -2.0, 0.5, 0.25]


@pytest.mark.parametrize("grad_dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_clip_scales_decoupled_grads(grad_dtype):
    param = torch.nn.Parameter(torch.zeros(4, dtype=grad_dtype, device="cuda"))
    param.decoupled_grad = torch.tensor(GRAD, dtype=grad_dtype, device="cuda")
    total_norm = float(torch.tensor(GRAD).norm())
    # Clip to half the norm: a coefficient of exactly 0.5, so the scaled grads are exact.
    max_norm = (total_norm + 1.0e-6) * 0.5

    try:
        clip_grad_by_total_norm_fp32([param], max_norm, total_norm, use_decoupled_grad=True)
    except AssertionError:
        pytest.fail(f"clip_grad_by_total_norm_fp32 rejected a {grad_dtype} decoupled grad")

    expected = torch.tensor(GRAD, dtype=grad_dtype) * 0.5
    assert torch.equal(param.decoupled_grad.cpu(), expected), (
        f"{grad_dtype} decoupled grad {param.decoupled_grad.cpu().tolist()} after clipping to "
        f"half the norm, expected {expected.tolist()}"
    )
