"""Resuming from a torch-format checkpoint must keep the model weights it has just loaded.

`load_checkpoint` loads the model's weights first, then `optimizer.load_state_dict` and
`load_parameter_state`. On a fresh rank the hybrid optimizer has no state yet, so
`DistributedOptimizer.load_state_dict` first calls `HybridDeviceOptimizer.dummy_step()`: random
grads and a real step, whose copy-back writes each sub-optimizer's parameter (the copy made when
the optimizer was built, stepped once) over the hybrid optimizer's own. With the precision-aware
optimizer those are the model's weights, so the ones just loaded are lost, and the parameter
state loaded afterwards does not bring them back.
"""

import copy

import pytest
import torch

from dp1_helpers import bf16_params, distributed_optimizer, offload_config, step

SHAPES = [(4,), (2, 3)]
GRADS = [[1.0, -2.0, 0.5, 0.25], [-0.5, 1.0, 0.75, -1.0, 0.25, 2.0]]
STEPS = 3
# Large enough that three steps take every weight many bf16 spacings away from its initial 0.5,
# where the dummy step's single step from 0.5 leaves it.
LR = 0.05


def _distributed_optimizer(offload_fraction):
    """A bf16 model's DistributedOptimizer over the hybrid optimizer (precision-aware, as
    --optimizer-cpu-offload requires), built by the optimizer factory."""
    params = bf16_params(SHAPES)
    return distributed_optimizer(offload_config(offload_fraction, lr=LR), params)[0], params


def _assert_weights(params, want, when):
    for index, (param, value) in enumerate(zip(params, want)):
        got = param.detach().cpu()
        assert torch.equal(got, value), (
            f"param {index} {when}: {got.flatten().tolist()}, "
            f"{value.flatten().tolist()} loaded"
        )


@pytest.mark.parametrize("offload_fraction", [1.0, 0.0])
def test_torch_format_resume_keeps_the_loaded_weights(offload_fraction):
    saving, saving_params = _distributed_optimizer(offload_fraction)
    for _ in range(STEPS):
        step(saving, saving_params, GRADS)
    weights = [param.detach().cpu().clone() for param in saving_params]
    common = copy.deepcopy(saving.state_dict())
    param_state = copy.deepcopy(saving.get_parameter_state_dp_zero())

    loading, loading_params = _distributed_optimizer(offload_fraction)
    with torch.no_grad():
        for loading_param, weight in zip(loading_params, weights):
            loading_param.copy_(weight)
    loading.load_state_dict(common)
    _assert_weights(loading_params, weights, "after load_state_dict")
    loading.load_parameter_state_from_dp_zero(param_state)
    _assert_weights(loading_params, weights, "after load_parameter_state_from_dp_zero")
