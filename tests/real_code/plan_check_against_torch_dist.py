"""Megatron's own `torch_dist` save (dist_checkpointing.save, torch.distributed.checkpoint's
planner) and the worker's check of the save plan (sim/megatron/dist_checkpoint.py validate_plan)
on the same chunks of one tensor, saved by one rank: each line of the output is a JSON object
{"chunks", "shape", "torch_dist", "worker"}, the two verdicts "accepted" or "refused: WHY".

    PEERS_PYTHON tests/real_code/plan_check_against_torch_dist.py TREE

Runs with the benchmarks' peers environment, whose psutil Megatron's asynchronous writer needs.
The writer's two CUDA calls are served by the host on a machine without a GPU: its
`torch.cuda.synchronize` before it copies the tensors (already on the host) is a no-op, and the
count of failed writes it all-reduces over Gloo lives on the CPU (`torch.cuda.current_device`).
"""

import json
import os
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (global shape, [(offset, length)...]): every element once; a chunk past the end (F16); two
# chunks over one element; a hole, which torch checks only for more than one rank.
GEOMETRIES = [
    (64, [(0, 1), (1, 63)]),
    (64, [(0, 1), (1, 127)]),
    (64, [(0, 2), (1, 63)]),
    (64, [(0, 1)]),
]


def torch_dist_verdict(shape, chunks):
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    state = {f"c{i}": ShardedTensor("k", torch.zeros(n), torch.float32, (n,), (shape,), (off,),
                                    axis_fragmentations=None, flattened_range=None,
                                    allow_shape_mismatch=False, replica_id=(0, 0, 0))
             for i, (off, n) in enumerate(chunks)}
    with tempfile.TemporaryDirectory() as directory:
        try:
            dist_checkpointing.save(state, directory)
        except ValueError as e:
            if str(e) != "Failed to validate global plan":
                raise
            return f"refused: {e}"
    return "accepted"


def worker_verdict(shape, chunks):
    import dist_checkpoint

    saved = dist_checkpoint.Saved()
    saved.shapes = {"k": (shape,)}
    saved.chunks = {"k": [((off,), (n,)) for off, n in chunks]}
    saved.ranks = saved.group = 1
    try:
        dist_checkpoint.validate_plan(saved)
    except RuntimeError as e:
        return f"refused: {e}"
    return "accepted"


def main():
    tree = sys.argv[1]
    sys.path[:0] = [tree, os.path.join(ROOT, "sim", "megatron")]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(20000 + os.getpid() % 30000),
                      RANK="0", WORLD_SIZE="1")
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"
    torch.distributed.init_process_group("gloo")
    try:
        for shape, chunks in GEOMETRIES:
            print(json.dumps({"shape": shape, "chunks": chunks,
                              "torch_dist": torch_dist_verdict(shape, chunks),
                              "worker": worker_verdict(shape, chunks)}), flush=True)
    finally:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
