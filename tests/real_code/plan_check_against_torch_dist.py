"""Megatron's own `torch_dist` save (dist_checkpointing.save, torch.distributed.checkpoint's
planner) and the worker's check of the save plan (sim/megatron/dist_checkpoint.py validate_plan)
on the same chunks of one tensor, saved by one or two ranks (processes over Gloo): each line of
the output is a JSON object {"shape", "chunks" (per rank), "torch_dist", "worker"}, the two
verdicts "accepted" or "refused: WHY".

    PEERS_PYTHON tests/real_code/plan_check_against_torch_dist.py TREE

Runs with the benchmarks' peers environment, whose psutil Megatron's asynchronous writer needs.
The writer's two CUDA calls are served by the host on a machine without a GPU: its
`torch.cuda.synchronize` before it copies the tensors (already on the host) is a no-op, and the
count of failed writes it all-reduces over Gloo lives on the CPU (`torch.cuda.current_device`).
"""

import datetime
import json
import os
import sys
import tempfile

import torch
import torch.multiprocessing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# (global shape, each rank's [(offset, length)...]). One rank: every element once; a chunk past
# the end (F16); two chunks over one element; a hole, which torch checks only for more than one
# rank. Two ranks: every element once; the hole F15's patch without its padding leaves. A plan
# two ranks save is refused on the coordinator alone (Megatron plans decentrally): the other
# rank goes on to write and waits at a barrier until the coordinator's process leaves, so such a
# geometry comes last.
GEOMETRIES = [
    (64, [[(0, 1), (1, 63)]]),
    (64, [[(0, 1), (1, 127)]]),
    (64, [[(0, 2), (1, 63)]]),
    (64, [[(0, 1)]]),
    (65, [[(0, 1), (1, 63)], [(64, 1)]]),
    (65, [[(0, 1)], [(64, 1)]]),
]


def torch_dist_verdict(shape, chunks, directory):
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedTensor

    state = {f"c{i}": ShardedTensor("k", torch.zeros(n), torch.float32, (n,), (shape,), (off,),
                                    axis_fragmentations=None, flattened_range=None,
                                    allow_shape_mismatch=False, replica_id=(0, 0, 0))
             for i, (off, n) in enumerate(chunks)}
    try:
        dist_checkpointing.save(state, directory)
    except Exception as e:  # noqa: BLE001 - a refused plan reaches the other ranks wrapped
        if "Failed to validate global plan" not in repr(e):
            raise
        return "refused: Failed to validate global plan"
    return "accepted"


def worker_verdict(shape, per_rank):
    import dist_checkpoint

    saved = dist_checkpoint.Saved()
    saved.shapes = {"k": (shape,)}
    saved.chunks = {"k": [((off,), (n,)) for chunks in per_rank for off, n in chunks]}
    saved.ranks = saved.group = len(per_rank)
    try:
        dist_checkpoint.validate_plan(saved)
    except RuntimeError as e:
        return f"refused: {e}"
    return "accepted"


def rank_main(rank, tree, world, port, geometries, base):
    sys.path[:0] = [tree, os.path.join(ROOT, "sim", "megatron")]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: "cpu"
    torch.distributed.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        for i, (shape, per_rank) in enumerate(geometries):
            try:
                verdict = torch_dist_verdict(shape, per_rank[rank], os.path.join(base, str(i)))
            except RuntimeError:
                if rank == 0 or i != len(geometries) - 1:
                    raise
                return  # the coordinator refused the last plan and left (see GEOMETRIES)
            if rank == 0:
                print(json.dumps({"shape": shape, "chunks": per_rank, "torch_dist": verdict,
                                  "worker": worker_verdict(shape, per_rank)}), flush=True)
    finally:
        torch.distributed.destroy_process_group()


def main():
    tree = sys.argv[1]
    for world in sorted({len(per_rank) for _, per_rank in GEOMETRIES}):
        geometries = [g for g in GEOMETRIES if len(g[1]) == world]
        port = 20000 + (os.getpid() * 7 + world) % 30000
        with tempfile.TemporaryDirectory() as base:
            for i in range(len(geometries)):
                os.mkdir(os.path.join(base, str(i)))
            torch.multiprocessing.spawn(rank_main, args=(tree, world, port, geometries, base),
                                        nprocs=world)


if __name__ == "__main__":
    main()
