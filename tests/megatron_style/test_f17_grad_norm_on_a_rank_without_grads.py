"""`get_grad_norm_fp32` must take every norm type on a rank that holds no grads.

`get_grad_norm_fp32(grads_for_norm, norm_type, grad_stats_parallel_group)` is public: callers
outside the optimizer pass the inf norm or another p. Every rank of the group joins the
all-reduce, and a rank can hold no grads (its shard of the buffers is empty, its stage frozen).
At d8b71082 such a rank raises instead: the inf branch takes `max()` of an empty sequence
(ValueError), the p branch all-reduces the Python float it started from (TypeError), and the
other ranks wait in their all-reduce. The rank's share must be zero: here, a group of one rank
without grads gets a norm of zero, and its grads, once it has some, their norm.
"""

import math

import pytest
import torch

from megatron.core.optimizer.clip_grads import get_grad_norm_fp32

GRAD = [3.0, -4.0, 0.0, 1.0]
NORMS = {math.inf: 4.0, 1.0: 8.0, 3.0: (27.0 + 64.0 + 1.0) ** (1.0 / 3.0), 2.0: 26.0 ** 0.5}


@pytest.mark.parametrize("norm_type", [math.inf, 1.0, 3.0, 2.0], ids=["inf", "p1", "p3", "p2"])
def test_a_rank_without_grads_shares_zero(norm_type):
    try:
        norm = get_grad_norm_fp32([], norm_type=norm_type)
    except (ValueError, TypeError) as e:
        pytest.fail(f"norm type {norm_type} on a rank without grads raised "
                    f"{type(e).__name__}: {e}")
    assert float(norm) == 0.0, f"norm type {norm_type} without grads: {norm}, expected 0"


@pytest.mark.parametrize("norm_type", [math.inf, 1.0, 3.0, 2.0], ids=["inf", "p1", "p3", "p2"])
def test_a_rank_with_grads_gets_their_norm(norm_type):
    grad = torch.tensor(GRAD, dtype=torch.float32, device="cuda")
    norm = float(get_grad_norm_fp32([grad], norm_type=norm_type))
    assert norm == pytest.approx(NORMS[norm_type], rel=1e-6), (
        f"norm type {norm_type} of {GRAD}: {norm}, expected {NORMS[norm_type]}")
