"""Gathered parameter state must round-trip TE FusedAdam's bf16 param remainders.

With the precision-aware optimizer and `store_param_remainders` (the default from TE 2.1), TE's
FusedAdam keeps, for each bf16 param, only the low 16 bits of its fp32 master, as an int16
`master_param`. `get_parameter_state_dp_zero` takes that int16 tensor from
`get_unscaled_state` and copies it into the fp32 world tensor of main params, so the remainder's
integer value is saved where the fp32 master belongs. On load,
`load_parameter_state_from_dp_zero` hands the fp32 slice to
`set_scaled_state(param, "master_param", ...)`, which asserts an int16 tensor for such a param:
the load raises AssertionError. The same world tensors serve the `dp_zero_gather_scatter` and
`fully_reshardable` distributed checkpoints and torch-format checkpoints.
"""

import copy

import pytest
import torch

from megatron.core.optimizer import OptimizerConfig

from dp1_helpers import bf16_params, distributed_optimizer, step

try:
    from transformer_engine.pytorch.optimizers import FusedAdam  # noqa: F401

    HAVE_TE = True
except ImportError:
    HAVE_TE = False

SHAPES = [(4,), (2, 3)]
GRADS = [[1.0, -2.0, 0.5, 0.25], [-0.5, 1.0, 0.75, -1.0, 0.25, 2.0]]
STEPS = 3


def _distributed_optimizer():
    """A bf16 model's precision-aware DistributedOptimizer over TE's FusedAdam (no offload),
    built by the optimizer factory with Megatron's default store_param_remainders."""
    params = bf16_params(SHAPES)
    config = OptimizerConfig(
        optimizer="adam",
        lr=1e-3,
        bf16=True,
        use_distributed_optimizer=True,
        use_precision_aware_optimizer=True,
    )
    return distributed_optimizer(config, params)[0], params


def _fused_adam_state(optimizer, params):
    """Per model param: its bf16 values and TE FusedAdam's state of its shard, on the host."""
    fused_adam = optimizer.optimizer
    states = []
    for param in params:
        group_index, group_order = optimizer.model_param_group_index_map[param]
        shard = fused_adam.param_groups[group_index]["params"][group_order]
        state = {k: v.detach().cpu().clone() for k, v in fused_adam.state[shard].items()}
        state["bf16_param"] = param.detach().cpu().clone()
        states.append(state)
    return states


@pytest.mark.skipif(not HAVE_TE, reason="Transformer Engine's FusedAdam is not available")
def test_dp_zero_round_trip_keeps_param_remainders():
    saving, saving_params = _distributed_optimizer()
    if not saving.config.store_param_remainders:
        pytest.skip("this Transformer Engine keeps no param remainders (TE < 2.1)")
    for _ in range(STEPS):
        step(saving, saving_params, GRADS)
    saved = _fused_adam_state(saving, saving_params)
    assert saved[0]["master_param"].dtype == torch.int16
    # A torch-format checkpoint: the common state dict and the gathered parameter state.
    common = copy.deepcopy(saving.state_dict())
    param_state = copy.deepcopy(saving.get_parameter_state_dp_zero())

    loading, loading_params = _distributed_optimizer()
    with torch.no_grad():
        for loading_param, saving_param in zip(loading_params, saving_params):
            loading_param.copy_(saving_param)
    loading.load_state_dict(common)
    try:
        loading.load_parameter_state_from_dp_zero(param_state)
    except AssertionError:
        pytest.fail(
            "load_parameter_state_from_dp_zero raised AssertionError: the gathered state "
            "holds the int16 param remainders as fp32 master params"
        )

    loaded = _fused_adam_state(loading, loading_params)
    for index, (got, want) in enumerate(zip(loaded, saved)):
        for key, value in want.items():
            assert torch.equal(got[key], value), (
                f"param {index}: {key} {got[key].flatten().tolist()} after the load, "
                f"{value.flatten().tolist()} saved"
            )
