"""A chained optimizer must save and load when one of its optimizers is a stub.

`get_megatron_optimizer` always builds the dense parameters' optimizer, and where no dense
parameter is trainable on a rank (every one frozen, as when only the experts are trained) that
optimizer is a stub: it has no inner optimizer. Beside it the experts' optimizer is real, so the
ChainedOptimizer over the two is not a stub and the trainer saves and loads it. At d8b71082 its
`_synchronize_steps` reads `optimizer.optimizer.param_groups` of each chained optimizer, the stub's
too (AttributeError on None), and its save and load hand the stub a state dict it has none of.
"""

import copy

import pytest
import torch

from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.optimizer import (
    ChainedOptimizer,
    Float16OptimizerWithFloat16Params,
    OptimizerConfig,
)


def _init_state(optimizer, config=None):
    for group in optimizer.param_groups:
        for p in group["params"]:
            if len(optimizer.state[p]) == 0:
                optimizer.state[p]["exp_avg"] = torch.zeros_like(p.data)
                optimizer.state[p]["exp_avg_sq"] = torch.zeros_like(p.data)


def _chain():
    """A frozen dense parameter's stub beside an expert parameter's optimizer, one step taken."""
    config = OptimizerConfig(optimizer="adam", lr=1e-3, bf16=True, use_distributed_optimizer=False)
    dense = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16, device="cuda"),
                               requires_grad=False)
    expert = torch.nn.Parameter(torch.full((6,), 0.5, dtype=torch.bfloat16, device="cuda"))
    # One param group as Megatron's _get_param_groups makes it, with the keys a load matches on.
    group = {"params": [expert], "wd_mult": 1.0, "lr_mult": 1.0, "is_expert_parallel": True,
             "is_decoupled_lr": False}
    inner = torch.optim.AdamW([group], lr=1e-3, weight_decay=0.01)
    stub = Float16OptimizerWithFloat16Params(None, config, None, None)
    experts = Float16OptimizerWithFloat16Params(inner, config, None, _init_state)
    for optimizer in (stub, experts):  # as the factory sets it: the world's group here
        optimizer.grad_stats_parallel_group = None
    chain = ChainedOptimizer([stub, experts])
    assert not chain.is_stub_optimizer and stub.is_stub_optimizer
    expert.main_grad = torch.linspace(-1.0, 1.0, 6).cuda()
    chain.step()
    model = {name: ShardedTensor.from_rank_offsets(name, p, replica_id=0)
             for name, p in (("dense.weight", dense), ("experts.weight", expert))}
    return chain, experts, model


def test_a_chain_with_a_stub_saves():
    chain, experts, model = _chain()
    try:
        saved = chain.sharded_state_dict(model)
    except AttributeError as e:
        pytest.fail(f"sharded_state_dict of a chain with a stub raised AttributeError: {e}")
    assert saved[0] == {}, "the stub has no state to save"
    assert len(saved[1]["optimizer"]["state"]) > 0, "the experts' state is saved"


def test_a_chain_with_a_stub_loads():
    chain, experts, _ = _chain()
    state = copy.deepcopy(experts.state_dict())
    try:
        chain.load_state_dict({0: {}, 1: state})
    except (AttributeError, KeyError) as e:
        pytest.fail(f"load_state_dict of a chain with a stub raised {type(e).__name__}: {e}")
