"""A `fully_reshardable` checkpoint must give every param its own optimizer state.

`get_parameter_state_dp_zero` packs each buffer's state into world tensors bucket by bucket,
keeping only each bucket's `numel_unpadded` elements: the padding at the end of every bucket is
stripped. `sharded_param_state_fully_reshardable` then cuts each param's state out of those
world tensors at `buffer.param_index_map`'s offsets, which count that padding. Every param in a
bucket after the first is read further on by the padding stripped before its bucket; past the
end of the world tensor the slice is padded with zeros ("param range exceeds unpadded buffer").
With one bucket (no overlapped grad reduction) nothing is stripped before any param.
The checkpoint goes through `dist_checkpointing.save` and `load` (`torch_dist`) into a temporary
directory, and through an in-memory stand-in of that storage on one rank.
"""

import copy

import pytest
import torch

from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing import ShardedTensor
from megatron.core.dist_checkpointing.dict_utils import dict_list_map_inplace, nested_values
from megatron.core.distributed.distributed_data_parallel_config import (
    DistributedDataParallelConfig,
)
from megatron.core.optimizer import OptimizerConfig

from dp1_helpers import (bf16_params, distributed_optimizer, offload_config,
                         skip_without_torch_dist_writer, step)

try:
    from transformer_engine.pytorch.optimizers import FusedAdam  # noqa: F401

    HAVE_TE = True
except ImportError:
    HAVE_TE = False

# Each param fills a bucket of BUCKET_SIZE elements or more, so each gets a bucket of its own.
SHAPES = [(4,), (2, 3), (4,)]
BUCKET_SIZE = 4
GRADS = [[1.0, -2.0, 0.5, 0.25], [-0.5, 1.0, 0.75, -1.0, 0.25, 2.0], [0.5, 0.25, -1.0, 2.0]]
METADATA = {"distrib_optim_sharding_type": "fully_reshardable"}
# Where the checkpoint goes: Megatron's torch_dist files, or the in-memory stand-in below.
STORAGES = ["torch_dist", "in_memory"]


def _optimizer_config(inner):
    if inner == "hybrid":
        return offload_config(1.0)
    return OptimizerConfig(optimizer="adam", lr=1e-3, bf16=True, use_distributed_optimizer=True)


def _distributed_optimizer(inner):
    """A bf16 model in several buckets and its DistributedOptimizer, built by the optimizer
    factory."""
    params = bf16_params(SHAPES)
    ddp_config = DistributedDataParallelConfig(
        use_distributed_optimizer=True, overlap_grad_reduce=True, bucket_size=BUCKET_SIZE
    )
    optimizer, chunk = distributed_optimizer(_optimizer_config(inner), params, ddp_config)
    assert len(chunk.buffers[0].buckets) == len(SHAPES)
    return optimizer, params


def _model_sharded_state_dict(params):
    return {
        f"param{i}": ShardedTensor.from_rank_offsets(f"param{i}", param, replica_id=(0, 0, 0))
        for i, param in enumerate(params)
    }


def _saved_and_loaded(storage, directory, saved, loading):
    """What dist_checkpointing.load of `loading` returns after dist_checkpointing.save of
    `saved`, through `storage`."""
    if storage == "in_memory":
        return _in_memory_saved_and_loaded(saved, loading)
    skip_without_torch_dist_writer()
    dist_checkpointing.save(saved, str(directory))
    return dist_checkpointing.load(loading, str(directory))


def _in_memory_saved_and_loaded(saved, loading):
    """On one rank, what dist_checkpointing.load of `loading` returns after
    dist_checkpointing.save of `saved`: each ShardedTensor of `loading` replaced by the data
    saved under its key, and the common (non-sharded) state as saved."""
    stored = {
        value.key: value.data.detach().clone()
        for value in nested_values(saved)
        if isinstance(value, ShardedTensor)
    }
    loaded = dict_list_map_inplace(
        lambda value: stored[value.key] if isinstance(value, ShardedTensor) else value, loading
    )
    loaded["optimizer"] = copy.deepcopy(saved["optimizer"])
    return loaded


def _param_states(optimizer, params):
    return [
        {
            key: value.detach().cpu().clone()
            for key, value in optimizer._get_main_param_and_optimizer_states(param).items()
        }
        for param in params
    ]


# Without TE or Apex, DistributedOptimizer.state_dict() of the fresh optimizer that
# sharded_state_dict(is_loading=True) starts from asserts a single step count and fails.
@pytest.mark.skipif(not HAVE_TE, reason="Transformer Engine's FusedAdam is not available")
@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("inner", ["adam", "hybrid"])
def test_fully_reshardable_round_trip_with_several_buckets(inner, storage, tmp_path):
    saving, saving_params = _distributed_optimizer(inner)
    step(saving, saving_params, GRADS)
    saved = _param_states(saving, saving_params)
    checkpoint = saving.sharded_state_dict(
        _model_sharded_state_dict(saving_params), metadata=METADATA
    )

    loading, loading_params = _distributed_optimizer(inner)
    with torch.no_grad():
        for loading_param, saving_param in zip(loading_params, saving_params):
            loading_param.copy_(saving_param)
    to_load = loading.sharded_state_dict(
        _model_sharded_state_dict(loading_params), is_loading=True, metadata=METADATA
    )
    loading.load_state_dict(_saved_and_loaded(storage, tmp_path, checkpoint, to_load))

    loaded = _param_states(loading, loading_params)
    for index, (got, want) in enumerate(zip(loaded, saved)):
        for key, value in want.items():
            assert torch.equal(got[key], value), (
                f"param {index} (bucket {saving.model_param_gbuf_map[saving_params[index]][2]}): "
                f"{key} {got[key].tolist()} after the load, {value.tolist()} saved"
            )
