"""A dp_reshardable checkpoint must be saved when a bucket ends in the alignment padding after
its last param.

The buffer closes a bucket before a shared embedding at the embedding's 64-aligned start, so that
bucket's unpadded size, the global shape `sharded_param_state_dp_reshardable` gives its checkpoint
tensors, takes in the alignment padding after the bucket's last param. The bucket itself is padded
further (to a multiple of 128 elements here), and the save pads the state after a rank's last
param on to the end of the rank's padded shard, past the unpadded size: the chunk lies outside
its tensor, and torch.distributed.checkpoint refuses the whole save while it plans it ("Failed to
validate global plan").

Two one-element bf16 params at data-parallel size 1, the first a shared embedding: bucket 0 holds
the second at [0, 1), 64 elements unpadded and 128 padded. The save goes through
`dist_checkpointing.save` with the default torch_dist strategy (Megatron's writer needs psutil).
"""

from megatron.core import dist_checkpointing
from megatron.core.dist_checkpointing.mapping import ShardedTensor
from megatron.core.optimizer import OptimizerConfig

from dp1_helpers import bf16_params, distributed_optimizer, skip_without_torch_dist_writer, step


def test_dp_reshardable_save_of_a_bucket_ending_in_alignment_padding(tmp_path):
    skip_without_torch_dist_writer()
    params = bf16_params([(1,), (1,)])
    params[0].shared_embedding = True
    config = OptimizerConfig(optimizer="adam", lr=1e-3, bf16=True, use_distributed_optimizer=True)
    optimizer, chunk = distributed_optimizer(config, params)
    bucket = chunk.buffers[0].buckets[0]
    assert (bucket.numel_unpadded, bucket.grad_data.numel()) == (64, 128)
    step(optimizer, params, [[0.5], [-0.25]])
    model = {
        f"param{i}": ShardedTensor.from_rank_offsets(f"param{i}", param, replica_id=(0, 0, 0))
        for i, param in enumerate(params)
    }
    metadata = {"distrib_optim_sharding_type": "dp_reshardable"}
    state = {"model": model, "optimizer": optimizer.sharded_state_dict(model, metadata=metadata)}
    dist_checkpointing.save(state, str(tmp_path))
