"""Loading gathered parameter state must reach the hybrid optimizer's sub-optimizers.

`load_parameter_state_from_dp_zero` (the `dp_zero_gather_scatter` distributed checkpoint, and
`load_parameter_state` of torch-format checkpoints) hands each shard's tensors to
`_set_main_param_and_optimizer_states`, which, for a HybridDeviceOptimizer, assigns them into
`hdo.state`. Unlike `load_parameter_state_from_fully_reshardable` and
`load_parameter_state_from_fs_model_space`, it does not then call
`_sync_hdo_state_to_sub_optimizers()`. The fp32 copies that the sub-optimizers step keep the
values they had before (after a fresh load, those of the dummy step in `load_state_dict`), so the
loaded master params are ignored. The loaded moments reach the sub-optimizers only because their
per-param state dicts are those of `hdo.state`, and they stay on the host, also for the
accelerator's sub-optimizer.
"""

import copy

import pytest
import torch

from dp1_helpers import bf16_params, distributed_optimizer, offload_config, step

SHAPES = [(4,), (2, 3)]
GRADS = [[1.0, -2.0, 0.5, 0.25], [-0.5, 1.0, 0.75, -1.0, 0.25, 2.0]]
# Three steps move every master further than the dummy step that load_state_dict takes on a
# fresh hybrid optimizer.
STEPS = 3


def _distributed_optimizer(offload_fraction):
    """A bf16 model's DistributedOptimizer over the hybrid optimizer (precision-aware, as
    --optimizer-cpu-offload requires), built by the optimizer factory."""
    params = bf16_params(SHAPES)
    return distributed_optimizer(offload_config(offload_fraction), params)[0], params


def _sub_optimizer_state(optimizer, params):
    """Per model param, on the host: the fp32 copy that one of the hybrid optimizer's
    sub-optimizers steps, as "param", and that sub-optimizer's moments for it."""
    hdo = optimizer.optimizer
    states = []
    for param in params:
        group_index, group_order = optimizer.model_param_group_index_map[param]
        shard = hdo.param_groups[group_index]["params"][group_order]
        inner = hdo.param_to_inner_param[shard]
        sub_optimizer = next(o for o in hdo.sub_optimizers if inner in o.state)
        state = {k: sub_optimizer.state[inner][k] for k in ("exp_avg", "exp_avg_sq")}
        state["param"] = inner
        states.append({k: v.detach().cpu().clone() for k, v in state.items()})
    return states


@pytest.mark.parametrize("offload_fraction", [1.0, 0.0])
def test_dp_zero_round_trip_reaches_the_sub_optimizers(offload_fraction):
    saving, saving_params = _distributed_optimizer(offload_fraction)
    for _ in range(STEPS):
        step(saving, saving_params, GRADS)
    saved = _sub_optimizer_state(saving, saving_params)
    # A torch-format checkpoint: the common state dict and the gathered parameter state.
    common = copy.deepcopy(saving.state_dict())
    param_state = copy.deepcopy(saving.get_parameter_state_dp_zero())

    loading, loading_params = _distributed_optimizer(offload_fraction)
    with torch.no_grad():
        for loading_param, saving_param in zip(loading_params, saving_params):
            loading_param.copy_(saving_param)
    loading.load_state_dict(common)
    loading.load_parameter_state_from_dp_zero(param_state)

    loaded = _sub_optimizer_state(loading, loading_params)
    for index, (got, want) in enumerate(zip(loaded, saved)):
        for key, value in want.items():
            assert torch.equal(got[key], value), (
                f"param {index}: the sub-optimizer steps from {key} "
                f"{got[key].flatten().tolist()} after the load, {value.flatten().tolist()} saved"
            )
