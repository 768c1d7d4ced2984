"""Self-test of the Megatron worker's training mode against a Megatron-LM tree (d8b71082 or one
like it), on copies with the seed fix and with each of tests/training/'s patches:

    $(scripts/python-env) sim/megatron/test_worker_training.py TREE

DDP's hooks deliver main_grad bit for bit, a training rank steps as a plain one does, and each
training patch is caught. The literal cases and the worker client are test_worker.py's. Exits 0
when every check holds.
"""

import os
import subprocess
import sys
import tempfile
import time

import torch

from test_worker import (DISTRIB, DTYPES, FP32_SHARD_FIXED, HERE, Worker, bits, case, copy_tree,
                         floats, hyper, numel, param, seed_case, values_of)

REPO = os.path.dirname(os.path.dirname(HERE))
SEED_FIX = os.path.join(REPO, "patches", "pr6982.patch")
DETACHES_MODEL_PARAM = os.path.join(REPO, "tests", "training",
                                    "seed-fix-detaches-the-model-param.patch")
SKIPS_EXPERT_BUFFERS = os.path.join(REPO, "tests", "training",
                                    "zero-grad-buffer-skips-expert-buffers.patch")
INSTANCES = [(instance, rank) for instance in ("dense", "expert") for rank in range(2)]


def patched_tree(tree, destination, *patches):
    """A copy of the tree's megatron/ folder with the seed fix (patches/pr6982.patch, unless the
    tree carries it) and then `patches`, each applied with git apply."""
    copy_tree(tree, destination)
    with open(os.path.join(destination, DISTRIB)) as f:
        seed_fixed = FP32_SHARD_FIXED in f.read()
    environment = dict(os.environ, GIT_CEILING_DIRECTORIES=os.path.dirname(destination))
    for patch in ([] if seed_fixed else [SEED_FIX]) + list(patches):
        subprocess.run(["git", "apply", patch], cwd=destination, env=environment, check=True)
    return destination


def training_case(**switches):
    """A bf16, a kept-in-fp32 and an expert parameter at dp 2, each with a piece on both ranks."""
    return case([param("w", [70], "bf16"), param("alpha", [4, 50], "fp32", group=1),
                 param("e", [2, 100], "bf16", is_expert=True)], dp=2, expert_dp=2, **switches)


TRAINING_CASES = [training_case(cpu_offload=True, offload_fraction=0.5), training_case()]


def build_both(worker, spec, instance, rank, handle):
    """The same rank built without (handle) and with (handle + 1) training mode."""
    plain = worker.build(handle, spec, rank=rank, instance=instance)
    trained = worker.build(handle + 1, spec | {"training": True}, rank=rank, instance=instance)
    return plain, trained


def backward(worker, handle, grads):
    reply = worker("backward", handle=handle, grads=grads)
    assert reply["ok"], reply
    return {p["param"]: p for p in reply["params"]}


def fine_grads(spec):
    """Two grads exact in every dtype whose sum is not in bf16: 1 + k/128 (seven fraction bits)
    and 2^-8 or 2^-7."""
    first = [bits([1 + (i % 128) / 128 for i in range(numel(p))]) for p in spec["params"]]
    second = [bits([2.0 ** -8 * (1 + i % 2) for i in range(numel(p))]) for p in spec["params"]]
    return first, second


def main_grad_sum(spec, index, *grads, dtype=None):
    """The grads of case parameter `index` added up in its main_grad's dtype (the param's)."""
    dtype = dtype or DTYPES[spec["params"][index]["dtype"]]
    total = sum(floats(g[index]).to(dtype) for g in grads)
    return bits(total.to(torch.float32).tolist())


def check_training_construction(worker):
    """A training build observes exactly what the plain build does: ranges, groups, index map,
    placement of the hybrid optimizer."""
    for spec in TRAINING_CASES:
        for instance, rank in INSTANCES:
            plain, trained = build_both(worker, spec, instance, rank, 100)
            assert plain["error"] is None and trained["ranges"], trained
            assert {**plain, "id": 0} == {**trained, "id": 0}, (instance, rank, plain, trained)
            assert worker("drop", handle=100)["ok"] and worker("drop", handle=101)["ok"]


def check_training_backward(worker):
    """Autograd through DDP's hooks delivers G into main_grad, bit for bit, leaves param.grad
    None; zero_grad then backward gives G2; two backwards without it add up in the main_grad's
    dtype. A plain rank refuses backward and main_grads_from_backward, and a one-process worker
    the torch format."""
    for spec in TRAINING_CASES:
        g1, g2 = values_of(spec, 5), values_of(spec, 9)
        for instance, rank in INSTANCES:
            worker.build(102, spec | {"training": True}, rank=rank, instance=instance)
            for index, p in backward(worker, 102, g1).items():
                assert p["requires_grad"] and p["is_leaf"] and p["grad_is_none"], p
                assert p["main_grad"] == g1[index], (instance, rank, p)
            assert worker("zero_grad", handle=102, set_to_none=True)["ok"]
            for index, p in backward(worker, 102, g2).items():
                assert p["main_grad"] == g2[index], (instance, rank, p)
            assert worker("zero_grad", handle=102, set_to_none=False)["ok"]
            first, second = fine_grads(spec)
            backward(worker, 102, first)
            for index, p in backward(worker, 102, second).items():
                in_dtype = main_grad_sum(spec, index, first, second)
                assert p["main_grad"] == in_dtype, (instance, rank, p)
                exact = main_grad_sum(spec, index, first, second, dtype=torch.float32)
                assert (in_dtype != exact) == (spec["params"][index]["dtype"] == "bf16"), p
            assert worker("drop", handle=102)["ok"]
    spec = TRAINING_CASES[1]
    worker.build(103, spec)
    refused = worker("backward", handle=103, grads=values_of(spec, 5))
    assert not refused["ok"] and '"training": true' in refused["error"], refused
    refused = worker("step", handle=103, grads=values_of(spec, 5), hyper=hyper(1e-2, 0.1, 2),
                     main_grads_from_backward=True)
    assert not refused["ok"] and '"training": true' in refused["error"], refused
    # The torch format gathers over the DP group, and the sharded directory is shared by real
    # ranks: a one-process worker refuses both by name.
    refused = worker("save_dp_zero", handle=103, checkpoint=7)
    assert not refused["ok"] and "served on real ranks only" in refused["error"], refused
    refused = worker("save_sharded", handle=103, directory=".", sharding_type="fully_reshardable")
    assert not refused["ok"] and "shared by real ranks only" in refused["error"], refused
    assert worker("drop", handle=103)["ok"]


def check_training_steps(worker):
    """Two iterations (zero_grad, backward, step with main_grads_from_backward) observe bit for
    bit what a plain rank stepped with the same grads does."""
    for spec in TRAINING_CASES:
        for instance, rank in INSTANCES:
            build_both(worker, spec, instance, rank, 104)
            for salt in (5, 9):
                grads, step = values_of(spec, salt), hyper(1e-2, 0.1, 2)
                assert worker("step", handle=104, grads=grads, hyper=step)["ok"]
                assert worker("zero_grad", handle=105, set_to_none=True)["ok"]
                backward(worker, 105, grads)
                assert worker("step", handle=105, grads=grads, hyper=step,
                              main_grads_from_backward=True)["ok"]
            plain, trained = worker("observe", handle=104), worker("observe", handle=105)
            assert {**plain, "id": 0} == {**trained, "id": 0}, (instance, rank)
            assert any(e["state"]["present"] for g in trained["entries"] for e in g), trained
            assert worker("drop", handle=104)["ok"] and worker("drop", handle=105)["ok"]


def check_training_detached_model_param(tree):
    """tests/training/seed-fix-detaches-the-model-param.patch: construction succeeds with the
    shard a leaf, but the model param no longer requires grad, so backward never reaches its
    main_grad. A rank whose params all lost requires_grad runs no backward and says so."""
    with tempfile.TemporaryDirectory() as scratch:
        worker = Worker(patched_tree(tree, scratch, DETACHES_MODEL_PARAM))
        spec = TRAINING_CASES[0] | {"training": True}
        grads = values_of(spec, 5)
        for rank in range(2):
            built = worker.build(110, spec, rank=rank)
            assert built["error"] is None and built["final_groups_match"], built
            shard = next(t for g in built["groups"] for t in g if t["param"] == 1)
            assert shard["is_leaf"] and not shard["requires_grad"], shard
            params = backward(worker, 110, grads)
            assert not params[1]["requires_grad"] and params[1]["is_leaf"], params[1]
            assert params[1]["main_grad"] == [0] * 200, params[1]
            assert params[0]["requires_grad"] and params[0]["main_grad"] == grads[0], params[0]
            assert worker("drop", handle=110)["ok"]
        alone = seed_case(cpu_offload=True, training=True)
        assert worker.build(111, alone)["error"] is None
        (only,) = backward(worker, 111, [bits([0.5])]).values()
        assert not only["requires_grad"] and only["main_grad"] == [0], only
        assert worker.finish() == 0


def check_training_zero_grad_skips_experts(tree):
    """tests/training/zero-grad-buffer-skips-expert-buffers.patch: after backward(G1), zero_grad,
    backward(G2) an expert param's main_grad is G1 + G2; the dense ones are G2."""
    with tempfile.TemporaryDirectory() as scratch:
        worker = Worker(patched_tree(tree, scratch, SKIPS_EXPERT_BUFFERS))
        spec = TRAINING_CASES[1] | {"training": True}
        g1, g2 = values_of(spec, 5), values_of(spec, 9)
        for instance, rank in INSTANCES:
            worker.build(112, spec, rank=rank, instance=instance)
            backward(worker, 112, g1)
            assert worker("zero_grad", handle=112, set_to_none=True)["ok"]
            for index, p in backward(worker, 112, g2).items():
                expert = spec["params"][index]["is_expert"]
                want = main_grad_sum(spec, index, g1, g2) if expert else g2[index]
                assert p["main_grad"] == want, (instance, rank, p)
            assert worker("drop", handle=112)["ok"]
        assert worker.finish() == 0


def check_training(tree):
    """Training mode on the tree with the seed fix, then with each of tests/training/'s patches."""
    with tempfile.TemporaryDirectory() as scratch:
        worker = Worker(patched_tree(tree, scratch))
        for check in (check_training_construction, check_training_backward,
                      check_training_steps):
            started = time.perf_counter()
            check(worker)
            print(f"    {check.__name__} {time.perf_counter() - started:.2f} s")
        assert worker.finish() == 0
    for check in (check_training_detached_model_param, check_training_zero_grad_skips_experts):
        started = time.perf_counter()
        check(tree)
        print(f"    {check.__name__} {time.perf_counter() - started:.2f} s")


def main():
    tree = os.path.abspath(sys.argv[1])
    started = time.perf_counter()
    check_training(tree)
    print(f"ok  training mode: DDP's hooks deliver main_grad; both tests/training/ patches caught "
          f"({time.perf_counter() - started:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
