"""Self-test of the Megatron worker against a Megatron-LM tree (d8b71082 or one like it):

    $(scripts/python-env) sim/megatron/test_worker.py TREE [WORDS]

Starts the worker as a subprocess and checks literal cases: start-up and the trees it refuses, the
seed defect and its one-line fix (PR #6982), mixed-precision steps with exact first-step moments,
the hybrid optimizer's placement, the remaining requests, errors, and the time it all takes
(training mode: test_worker_training.py). WORDS runs only the checks whose names hold them.
Exits 0 when every check holds.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
PYTHON = sys.executable
LEAF_ERROR = "can't optimize a non-leaf Tensor"
DISTRIB = os.path.join("megatron", "core", "optimizer", "distrib_optimizer.py")
FP32_SHARD = "shard_model_param = model_param.view(-1)[param_range.start : param_range.end]"
FP32_SHARD_FIXED = ("shard_model_param = model_param.detach().view(-1)"
                    "[param_range.start : param_range.end]")


# ---- values ----

def bits(values, dtype=torch.float32):
    """Bit patterns of `values` rounded to `dtype` (then widened to fp32, exactly)."""
    t = torch.tensor(values, dtype=torch.float32).to(dtype).to(torch.float32)
    return t.view(torch.int32).numpy().view("uint32").tolist()


def floats(patterns):
    return torch.tensor(patterns, dtype=torch.int64).to(torch.int32).view(torch.float32)


def rounded(patterns, dtype):
    """Bit patterns of fp32 `patterns` rounded to `dtype` and widened back."""
    return bits(floats(patterns).tolist(), dtype)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp64": torch.float64}


# ---- cases ----

def param(name, shape, dtype="fp32", group=0, chunk=0, is_expert=False):
    return {"name": name, "shape": shape, "dtype": dtype, "is_expert": is_expert,
            "shared_embedding": False, "group": group, "chunk": chunk}


def case(params, **switches):
    out = {"params": params, "dp": 1, "expert_dp": 1, "bucket_size": None,
           "bucket_first_chunk_only": False, "pad_for_high_nccl_busbw": False,
           "grad_reduce_in_fp32": False, "precision_aware": False,
           "store_param_remainders": True, "cpu_offload": False, "offload_fraction": 1.0,
           "overlap_cpu_optimizer_d2h_h2d": True}
    out.update(switches)
    return out


def numel(p):
    n = 1
    for d in p["shape"]:
        n *= d
    return n


def values_of(spec, salt):
    """Deterministic values of each parameter, exact in the parameter's dtype."""
    out = []
    for k, p in enumerate(spec["params"]):
        n = numel(p)
        raw = [((7 * i + 3 * k + salt) % 23 - 11) / 16.0 + 0.03125 for i in range(n)]
        out.append(bits(raw, DTYPES[p["dtype"]]))
    return out


def hyper(lr, weight_decay, groups):
    return [{"lr": lr, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": weight_decay}
            for _ in range(groups)]


# ---- the worker ----

class Worker:
    def __init__(self, tree):
        self.log = tempfile.TemporaryFile(mode="w+")
        started = time.perf_counter()
        self.process = subprocess.Popen([PYTHON, WORKER, "--tree", tree], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.ready = json.loads(self.process.stdout.readline())
        self.start_up_s = time.perf_counter() - started
        self.next_id = 0

    def __call__(self, op, **fields):
        self.next_id += 1
        request = {"id": self.next_id, "op": op, **fields}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        assert reply["id"] == self.next_id, reply
        return reply

    def build(self, handle, spec, rank=0, instance="dense", weight_decay=(0.1, 0.0), salt=0):
        reply = self("build", handle=handle, instance=instance, rank=rank, case=spec,
                     initial=values_of(spec, salt), group_weight_decay=list(weight_decay))
        assert reply["ok"], reply
        return reply

    def finish(self):
        self.process.stdin.close()
        return self.process.wait(timeout=30)


def start_up_line(tree):
    result = subprocess.run([PYTHON, WORKER, "--tree", tree], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=60)
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0]), result.returncode


def copy_tree(tree, destination, edit=None):
    """A copy of the tree's megatron/ folder; `edit(text)` rewrites distrib_optimizer.py."""
    shutil.copytree(os.path.join(tree, "megatron"), os.path.join(destination, "megatron"))
    if edit is not None:
        path = os.path.join(destination, DISTRIB)
        with open(path) as f:
            text = f.read()
        changed = edit(text)
        assert changed != text, "the edit changed nothing"
        with open(path, "w") as f:
            f.write(changed)
    return destination


def seed_case(**switches):
    return case([param("alpha", [1])], **switches)


# ---- checks ----

def check_start_up(tree, worker):
    ready = worker.ready
    assert ready["ready"] is True and ready["tree"] == os.path.abspath(tree), ready
    assert ready["device"] == "cpu" and ready["torch"] == torch.__version__, ready
    assert ready["stand_ins"] and all(isinstance(s, str) for s in ready["stand_ins"]), ready
    with tempfile.TemporaryDirectory() as empty:
        line, code = start_up_line(empty)
        assert code == 2 and line["ready"] is False and line["kind"] == "not_a_tree", line
    renamed = [
        (lambda s: s.replace("def _build_model_and_main_param_groups(",
                             "def _build_model_and_main_param_groups_moved("),
         "_build_model_and_main_param_groups"),
        (lambda s: s.replace("per_model_buffers", "per_model_buffer_map"),
         "DistributedOptimizer.__init__ has no argument 'per_model_buffers'"),
    ]
    for edit, named in renamed:
        with tempfile.TemporaryDirectory() as scratch:
            line, code = start_up_line(copy_tree(tree, scratch, edit))
        assert code == 2 and line["kind"] == "api_moved" and named in line["error"], line


def check_seed(worker):
    failed = worker.build(1, seed_case(cpu_offload=True, offload_fraction=1.0))
    assert failed["error"] == LEAF_ERROR and failed["error_type"] == "ValueError", failed
    assert failed["failing_param"] == 0, failed
    shard = failed["groups"][0][0]
    assert shard["param"] == 0 and shard["dtype"] == "fp32" and shard["numel"] == 1, shard
    assert not shard["is_leaf"] and shard["requires_grad"] and shard["has_grad_fn"], shard
    (buffer,) = failed["ranges"]
    assert buffer["param_dtype"] == "fp32" and buffer["grad_dtype"] == "fp32", buffer
    assert buffer["buckets"][0]["world"] == [0, 128], buffer
    assert buffer["buckets"][0]["params"][0]["param_range"] == [0, 1], buffer
    assert failed["index_map"] == [[0, 0, 0]], failed
    step = worker("step", handle=1, grads=[bits([1.0])], hyper=hyper(1e-3, 0.0, 1))
    assert not step["ok"] and "construction failed" in step["error"], step
    # Any offload fraction: the rebuild's leaf check runs before the split.
    zero = worker.build(2, seed_case(cpu_offload=True, offload_fraction=0.0))
    assert zero["error"] == LEAF_ERROR and zero["failing_param"] == 0, zero
    plain = worker.build(3, seed_case(cpu_offload=False))
    assert plain["error"] is None and plain["error_type"] == "" and plain["failing_param"] == -1
    shard = plain["groups"][0][0]
    assert not shard["is_leaf"] and shard["has_grad_fn"] and shard["requires_grad"], shard
    assert shard["aliases_model"] and shard["alias_offset"] == 0, shard
    assert not shard["model_has_main_param"] and plain["final_groups_match"], plain
    assert plain["accel_bytes"] == 2 * 128 * 4 and plain["host_bytes"] == 0, plain
    for handle in (1, 2, 3):
        assert worker("drop", handle=handle)["ok"]


def check_loss_scaler(worker):
    """Megatron's dynamic scaler on a plain distributed optimizer: an inf grad, on this rank or
    (found_inf_elsewhere) on another, skips the step and backs the scale off; a finite one steps
    with the grad unscaled, and the hysteresis count stays spent until the scale grows."""
    assert worker.build(4, seed_case(cpu_offload=False))["error"] is None
    config = {"dynamic": True, "initial_scale": 4.0, "min_scale": 1.0, "growth_factor": 2.0,
              "backoff_factor": 0.5, "growth_interval": 2, "hysteresis": 1}
    assert worker("use_grad_scaler", handle=4, config=config)["ok"]
    before = worker("observe", handle=4)["entries"][0][0]
    expected = [(bits([float("inf")]), False, 2.0, 0, 0), (bits([2.0]), True, 1.0, 0, -1),
                (bits([1.0]), False, 1.0, 1, -1)]
    for grads, elsewhere, scale, growth, hysteresis in expected:
        assert worker("step", handle=4, grads=[grads], hyper=hyper(1e-2, 0.0, 1),
                      found_inf_elsewhere=elsewhere)["ok"]
        state = worker("grad_scaler_state", handle=4)
        assert state == {"id": state["id"], "ok": True, "present": True, "scale": scale,
                         "growth_tracker": growth, "hysteresis_tracker": hysteresis}, state
    after = worker("observe", handle=4)["entries"][0][0]
    assert after["state"]["present"] and after["state"]["step"] == 1, after
    assert after["model_piece"] != before["model_piece"], after
    assert worker("drop", handle=4)["ok"]


def check_grad_stats(worker):
    """Clipping and zero counting through the grad-stats group stand-in: grads (3, 4, 0) have
    norm 5, so clip_grad 1 scales them by 1 / (5 + 1e-6) and one zero is counted. With dp 2 and
    a shards list that gives the other rank the same three elements, its share doubles the
    squared norm and the count."""
    for handle, dp, norm, zeros in ((5, 1, 5.0, 1), (6, 2, 50.0 ** 0.5, 2)):
        built = worker.build(handle, case([param("alpha", [3])], dp=dp))
        assert built["error"] is None, built
        assert worker("use_grad_stats", handle=handle, clip_grad=1.0, log_num_zeros_in_grad=True,
                      shards=[[[0, 0, 3]]] * dp)["ok"]
        stepped = worker("step", handle=handle, grads=[bits([3.0, 4.0, 0.0])],
                         hyper=hyper(0.0, 0.0, 1))
        assert stepped["ok"], stepped
        last = worker("last_step", handle=handle)
        assert last["success"] and last["grad_norm"] == norm, last
        assert last["num_zeros_in_grad"] == zeros, last
        assert worker("drop", handle=handle)["ok"]
    check_grad_stats_unscaled(worker)


def check_grad_stats_unscaled(worker):
    """With a loss scale of 2, the grads (6, 8, 0) unscale to (3, 4, 0), on this rank and in the
    other rank's share (torch's own unscale kernel on both): norm 50 ** 0.5, two zeros."""
    built = worker.build(7, case([param("alpha", [3])], dp=2))
    assert built["error"] is None, built
    config = {"dynamic": False, "initial_scale": 2.0, "min_scale": 1.0, "growth_factor": 2.0,
              "backoff_factor": 0.5, "growth_interval": 2, "hysteresis": 1}
    assert worker("use_grad_scaler", handle=7, config=config)["ok"]
    assert worker("use_grad_stats", handle=7, clip_grad=1.0, log_num_zeros_in_grad=True,
                  shards=[[[0, 0, 3]]] * 2)["ok"]
    stepped = worker("step", handle=7, grads=[bits([6.0, 8.0, 0.0])], hyper=hyper(0.0, 0.0, 1))
    assert stepped["ok"], stepped
    last = worker("last_step", handle=7)
    assert last["success"] and last["grad_norm"] == 50.0 ** 0.5, last
    assert last["num_zeros_in_grad"] == 2, last
    assert worker("drop", handle=7)["ok"]


def check_fix(tree):
    with tempfile.TemporaryDirectory() as scratch:
        fixed = copy_tree(tree, scratch, lambda s: s.replace(FP32_SHARD, FP32_SHARD_FIXED, 1))
        worker = Worker(fixed)
        reply = worker.build(1, seed_case(cpu_offload=True, offload_fraction=1.0))
        assert reply["error"] is None and reply["final_groups_match"], reply
        shard = reply["groups"][0][0]
        assert shard["is_leaf"] and not shard["requires_grad"] and not shard["has_grad_fn"]
        assert shard["aliases_model"] and shard["alias_offset"] == 0, shard
        assert reply["offloaded_tensors"] == 1 and reply["host_bytes"] == 4, reply
        assert worker("step", handle=1, grads=[bits([0.5])], hyper=hyper(1e-2, 0.0, 1))["ok"]
        seen = worker("observe", handle=1)
        (entry,) = seen["entries"][0]
        assert entry["placement"]["offloaded"] and entry["state"]["present"], entry
        assert entry["model_piece"] == entry["optimizer_piece"] != values_of(
            seed_case(), 0)[0], entry
        check_offload(worker, with_fp32=True)
        assert worker.finish() == 0


def mixed_case():
    return case([param("emb", [100], "bf16"), param("alpha", [3, 5], "fp32", group=1),
                 param("w", [70], "bf16", group=1), param("gate", [2, 40], "fp32"),
                 param("b", [30], "fp16")], dp=2)


def entry_params(build):
    """Per installed entry (g, i): its case parameter and param range."""
    ranges = {p["param"]: p["param_range"]
              for buffer in build["ranges"] for bucket in buffer["buckets"]
              for p in bucket["params"]}
    return [[(t["param"], ranges[t["param"]]) for t in group] for group in build["groups"]]


def check_mixed_steps(worker):
    spec = mixed_case()
    initial = values_of(spec, 0)
    grads = values_of(spec, 5)
    for rank in range(2):
        build = worker.build(10 + rank, spec, rank=rank)
        assert build["error"] is None and build["final_groups_match"], build
        where = entry_params(build)
        assert worker("step", handle=10 + rank, grads=grads, hyper=hyper(0.0, 0.0, 2))["ok"]
        first = worker("observe", handle=10 + rank)
        for group, entries in zip(where, first["entries"]):
            for (p, (start, end)), e in zip(group, entries):
                assert e["model_piece"] == initial[p][start:end], (p, e)  # lr 0, wd 0
                assert e["state"]["present"] and e["state"]["step"] == 1, e
                if spec["params"][p]["dtype"] == "fp32":
                    grad = floats(grads[p][start:end])
                    expected = (grad * torch.tensor(1 - 0.9, dtype=torch.float32)).tolist()
                    assert e["state"]["exp_avg"] == bits(expected), (p, e)
                    assert e["optimizer_piece"] == e["model_piece"], e
        assert worker("step", handle=10 + rank, grads=grads, hyper=hyper(1e-2, 0.1, 2))["ok"]
        second = worker("observe", handle=10 + rank)
        for group, entries in zip(where, second["entries"]):
            for (p, (start, end)), e in zip(group, entries):
                dtype = DTYPES[spec["params"][p]["dtype"]]
                assert e["state"]["step"] == 2 and e["model_piece"] != initial[p][start:end]
                assert e["model_piece"] == rounded(e["optimizer_piece"], dtype), (p, e)
                assert e["placement"] == {"offloaded": False, "fp32_copy": False,
                                          "host_pinned": False, "cpu_optimizer": -1,
                                          "stepped_on_host": False, "state_on_host": {}}
        assert second["hyper"][0]["lr"] == 1e-2 and second["hyper"][1]["weight_decay"] == 0.1
        assert second["num_cpu_optimizers"] == 0 and not second["has_accelerator_optimizer"]


def offload_case(with_fp32, overlap):
    params = [param("emb", [300], "bf16"), param("w1", [64], "bf16", group=1),
              param("w2", [200], "fp16"), param("w3", [40], "bf16", group=1)]
    if with_fp32:
        params += [param("alpha", [24], "fp32"), param("gate", [8, 4], "fp32", group=1)]
    return case(params, dp=2, cpu_offload=True, offload_fraction=0.5,
                overlap_cpu_optimizer_d2h_h2d=overlap)


def expected_offload(build):
    """The hybrid optimizer's greedy prefix over installed entries, by element count."""
    sizes = [t["numel"] for group in build["groups"] for t in group]
    threshold, done, out = sum(sizes) * 0.5, 0, []
    for n in sizes:
        out.append(done < threshold)
        done += n if done < threshold else 0
    return out


def check_offload(worker, with_fp32=False):
    for overlap in (True, False):
        spec = offload_case(with_fp32, overlap)
        for rank in range(2):
            handle = 20 + rank + (2 if overlap else 0)
            build = worker.build(handle, spec, rank=rank)
            assert build["error"] is None and build["final_groups_match"], build
            offloaded = expected_offload(build)
            assert build["offloaded_tensors"] == sum(offloaded) > 0, build
            for _ in range(2):
                reply = worker("step", handle=handle, grads=values_of(spec, 3),
                               hyper=hyper(1e-2, 0.1, 2))
                assert reply["ok"], reply
            seen = worker("observe", handle=handle)
            check_placements(seen, offloaded, overlap)
            assert worker("drop", handle=handle)["ok"]


def check_placements(seen, offloaded, overlap):
    entries = [e for group in seen["entries"] for e in group]
    host = 0
    for e, off in zip(entries, offloaded):
        p = e["placement"]
        assert p["offloaded"] == off and p["stepped_on_host"] == off and not p["fp32_copy"], p
        assert not p["host_pinned"], p  # nothing is page-locked without CUDA
        assert p["cpu_optimizer"] == ((host if overlap else 0) if off else -1), p
        assert p["state_on_host"] == {"exp_avg": off, "exp_avg_sq": off, "master_param": off}
        assert e["state"]["present"] and e["state"]["step"] == 2, e
        assert e["state"]["master"] == e["optimizer_piece"], e
        host += off
    assert seen["num_cpu_optimizers"] == (host if overlap else min(host, 1)), seen
    assert seen["has_accelerator_optimizer"] == (host < len(entries)), seen


def check_requests(worker):
    spec = case([param("w", [8], "bf16"), param("g", [4], "fp32")])
    worker.build(30, spec)
    worker.build(31, spec | {"cpu_offload": True, "params": [param("w", [8], "bf16")]})
    new = values_of(spec, 9)
    for handle, values, reloads in ((30, new, True), (31, new[:1], False)):
        before = worker("observe", handle=handle)["entries"]
        assert worker("set_model_values", handle=handle, values=values)["ok"]
        assert worker("observe", handle=handle)["model_values"] == values
        assert worker("reload_model_params", handle=handle)["ok"]
        after = worker("observe", handle=handle)["entries"]
        bf16 = [e for group in after for e in group if e["model_piece"] == values[0]]
        # Without the hybrid optimizer the main params are reloaded; with it only its fp32 copies
        # of 16-bit shards are, and it holds none here.
        assert bf16 and all((e["optimizer_piece"] == values[0]) == reloads for e in bf16)
        assert before != after or not reloads
        for set_to_none in (True, False):
            assert worker("zero_grad", handle=handle, set_to_none=set_to_none)["ok"]
        assert worker("step", handle=handle, grads=values_of(spec, 4),
                      hyper=hyper(1e-3, 0.0, 1))["ok"]
    broken = worker("step", handle=30, grads=values_of(spec, 4),
                    hyper=[{"lr": None, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                            "weight_decay": 0.0}])
    assert not broken["ok"] and broken["error"].startswith("TypeError"), broken
    assert "distrib_optimizer.py" in broken["traceback"] or "optimizer.py" in broken["traceback"]
    assert worker("observe", handle=30)["ok"]
    check_transformer_engine(worker, spec)
    double = worker.build(33, case([param("d", [4], "fp64")]))
    assert double["error_type"] == "TypeError" and "torch.cuda.DoubleTensor" in double["error"]
    assert double["ranges"] == [] and double["groups"] == [], double
    assert worker("drop", handle=30)["ok"]
    gone = worker("observe", handle=30)
    assert not gone["ok"] and gone["error"].startswith("KeyError"), gone
    assert not worker("no_such_op", handle=31)["ok"]
    assert worker("observe", handle=31)["ok"]


def check_parallel_state(worker):
    """buffers_from_parallel_state: buffers built without a pg_collection read their groups
    from Megatron's own parallel_state, which has no name this tree lacks: this tree (without
    F19's patch) calls get_data_and_context_parallel_group there, and the build raises as
    Megatron does (the property DdpBuffers.* compares the two builds on a tree with the patch);
    parallel_state is uninitialized again after a build, as before it."""
    spec = case([param("a", [5], "bf16"), param("b", [3]), param("c", [6], "bf16", group=1)],
                dp=2, bucket_size=4)
    handed = worker.build(34, spec, rank=1)
    assert handed["error"] is None and handed["ranges"], handed
    from_state = worker("build", handle=35, instance="dense", rank=1,
                        case=spec | {"buffers_from_parallel_state": True},
                        initial=values_of(spec, 0), group_weight_decay=[0.1, 0.0])
    assert not from_state["ok"], from_state
    assert "no attribute 'get_data_and_context_parallel_group'" in from_state["error"], from_state
    import loader
    megatron = loader.Megatron.__new__(loader.Megatron)
    megatron.parallel_state = types.SimpleNamespace(
        **{name: None for name in loader.PARALLEL_STATE_GROUPS})
    with loader.parallel_groups(megatron, "dp", "tp"):
        assert megatron.parallel_state._DATA_PARALLEL_GROUP_WITH_CP == "dp"
    assert all(getattr(megatron.parallel_state, name) is None
               for name in loader.PARALLEL_STATE_GROUPS)
    assert worker("drop", handle=34)["ok"]


def check_transformer_engine(worker, spec):
    """Cases with Transformer Engine build and step on the FusedAdam stand-in: the precision-aware
    optimizer keeps its step in the group, a TE case after a no-TE one gets TE's class, and what
    the stand-in does not implement is refused by name."""
    for handle, switches in ((32, {"precision_aware": True}), (33, {})):
        built = worker("build", handle=handle, instance="dense", rank=0,
                       case=spec | {"transformer_engine": True} | switches,
                       initial=values_of(spec, 0), group_weight_decay=[0.1])
        assert built["ok"] and built["error"] is None, built
        for _ in range(2):
            assert worker("step", handle=handle, grads=values_of(spec, 4),
                          hyper=hyper(1e-3, 0.0, 1))["ok"]
        states = [e["state"] for g in worker("observe", handle=handle)["entries"] for e in g]
        assert states and all(s["present"] and s["step"] == 2 for s in states), states
        assert worker("drop", handle=handle)["ok"]
    import te_stand_in
    try:
        te_stand_in.FusedAdam([torch.zeros(1)], capturable=True)
        raise AssertionError("the stand-in accepted capturable=True")
    except te_stand_in.StandInRefused as e:
        assert "capturable" in str(e)


def check_te_arithmetic():
    """The stand-in's bias corrections are TE's (float betas) and its remainder split inverts its
    join, negative remainders (the rounded-up bf16) included."""
    import te_stand_in
    bc1, bc2 = te_stand_in.bias_corrections(0.9, 0.999, 1)
    assert bc2 == float(np.float32(1.0 - float(np.float32(0.999))))
    assert bc2 != float(np.float32(1.0 - 0.999))  # the double beta gives another float
    master = torch.tensor([1.0 + 2 ** -20, -3.140625 - 2 ** -17, 0.1, -0.0], dtype=torch.float32)
    param = torch.zeros(4, dtype=torch.bfloat16)
    remainder = torch.zeros(4, dtype=torch.int16)
    te_stand_in.split_remainder(master.clone(), param, remainder)
    assert torch.equal(param, master.to(torch.bfloat16)), (param, master)
    joined = te_stand_in.join_remainder(param, remainder)
    assert torch.equal(joined.view(torch.int32), master.view(torch.int32)), (joined, master)


def check_plan_validation():
    """The distributed checkpoint's check of the save plan (torch_dist's coordinator's): a bucket
    tensor of 65 elements that 4 ranks write as [0, 1) and [64, 65) misses 63 of them (F15 with
    its end padding left out); with [1, 64) written too it holds; two chunks over one element
    overlap; a chunk past the tensor's end lies outside; one rank alone is not checked for
    volume, as torch checks it only for more than one, nor a sample of the group's ranks."""
    import dist_checkpoint

    def problems(chunks, ranks=4, group=4):
        saved = dist_checkpoint.Saved()
        saved.shapes, saved.chunks = {"k": (65,)}, {"k": chunks}
        saved.ranks, saved.group = ranks, group
        try:
            dist_checkpoint.validate_plan(saved)
        except RuntimeError as e:
            return str(e)
        return ""

    assert "k: the chunks hold 2 of its 65 elements" in problems([((0,), (1,)), ((64,), (1,))])
    assert problems([((0,), (1,)), ((1,), (63,)), ((64,), (1,))]) == ""
    assert "k: chunks at (0,) and (0,) overlap" in problems([((0,), (1,)), ((0,), (65,))])
    assert "k: chunk at (60,) of shape (6,) lies outside (65,)" in problems(
        [((0,), (60,)), ((60,), (6,))])
    assert problems([((0,), (1,))], ranks=1, group=1) == ""
    assert problems([((0,), (1,)), ((64,), (1,))], ranks=2) == ""


def check_quit(tree):
    worker = Worker(tree)
    assert worker("quit") == {"id": 1, "ok": True}
    assert worker.process.wait(timeout=30) == 0
    worker = Worker(tree)
    assert worker.finish() == 0  # end of input


def binary_request(request):
    """`request` in the binary encoding: each value list of `initial` and `grads` moves after
    the JSON line as {"blob": [offset, length]} (docs/megatron-worker.md)."""
    blob = bytearray()

    def moved(patterns):
        raw = np.asarray(patterns, dtype=np.uint32).astype("<u4").tobytes()
        blob.extend(raw)
        return {"blob": [len(blob) - len(raw), len(raw)]}

    for key in ("initial", "grads"):
        if key in request:
            request[key] = [moved(v) for v in request[key]]
    line = json.dumps(dict(request, blob_bytes=len(blob)) if blob else request)
    return line.encode() + b"\n" + bytes(blob)


def binary_reply(stream):
    """A reply read from the binary `stream`, each blob back as a list of bit patterns."""
    reply = json.loads(stream.readline())
    blob = stream.read(reply.pop("blob_bytes", 0))

    def back(value):
        if isinstance(value, list):
            return [back(v) for v in value]
        if not isinstance(value, dict):
            return value
        if list(value) == ["blob"]:
            start, length = value["blob"]
            return np.frombuffer(blob[start:start + length], dtype="<u4").tolist()
        return {k: back(v) for k, v in value.items()}
    return back(reply)


def check_binary_values(tree, worker):
    """--values binary: the same build, step and observation as the list encoding, bit for bit;
    a blob span past the bytes sent is an error reply and the worker goes on."""
    spec = case([param("emb", [4, 3], "bf16"), param("alpha", [5], "fp32")], dp=2)
    requests = [{"op": "build", "handle": 50, "instance": "dense", "rank": 1, "case": spec,
                 "initial": values_of(spec, 1), "group_weight_decay": [0.1, 0.0]},
                {"op": "step", "handle": 50, "grads": values_of(spec, 3),
                 "hyper": hyper(1e-3, 0.1, 1)},
                {"op": "observe", "handle": 50}]
    expected = [worker(r["op"], **{k: v for k, v in r.items() if k != "op"}) for r in requests]
    assert worker("drop", handle=50)["ok"]
    process = subprocess.Popen([PYTHON, WORKER, "--tree", tree, "--values", "binary"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    assert json.loads(process.stdout.readline())["ready"]
    bad = b'{"id": 9, "op": "step", "blob_bytes": 2, "grads": [{"blob": [0, 8]}]}\n..'
    for k, request in enumerate(requests):
        process.stdin.write(binary_request(dict(request, id=expected[k]["id"])))
        process.stdin.write(bad if k == 0 else b"")
        process.stdin.flush()
        assert binary_reply(process.stdout) == expected[k], request["op"]
        if k == 0:
            refused = binary_reply(process.stdout)
            assert not refused["ok"] and "outside the 2 bytes" in refused["error"], refused
    process.stdin.close()
    assert process.wait(timeout=30) == 0


def time_small_case(worker):
    spec = case([param("emb", [64, 8], "bf16"), param("alpha", [16], "fp32"),
                 param("w", [32, 4], "bf16", group=1)], dp=2)
    started = time.perf_counter()
    worker.build(40, spec, rank=1)
    for _ in range(2):
        worker("step", handle=40, grads=values_of(spec, 2), hyper=hyper(1e-3, 0.1, 2))
    worker("observe", handle=40)
    return time.perf_counter() - started


def check_stream_races(worker):
    """check_stream_order: the pristine tree's overlapping hybrid step reads its cast fp32 grads
    with no wait (F6); a rank built without the checker has no races to ask for."""
    spec = case([param("w", [8], "bf16")], dp=1, cpu_offload=True, offload_fraction=0.0,
                overlap_cpu_optimizer_d2h_h2d=True, precision_aware=True,
                transformer_engine=True)
    reply = worker("build", handle=60, instance="dense", rank=0, case=spec,
                   initial=values_of(spec, 0), group_weight_decay=[0.1, 0.0],
                   check_stream_order=True)
    assert reply["ok"] and reply["error"] is None, reply
    assert worker("step", handle=60, grads=values_of(spec, 3), hyper=hyper(1e-2, 0.1, 2))["ok"]
    races = worker("stream_races", handle=60)
    assert races["ok"] and races["races"], races
    assert "(issued at hybrid_optimizer.py:93 _set_sub_optimizer_grads)" in races["races"][0], races
    assert worker("drop", handle=60)["ok"]
    worker.build(61, spec)
    refused = worker("stream_races", handle=61)
    assert not refused["ok"] and "without check_stream_order" in refused["error"], refused
    assert worker("drop", handle=61)["ok"]


def check_time_steps(worker):
    """time_steps (the benchmarks' op): one time per step, the hybrid step within each whole
    step and its host sub-optimizers' within that; one host AdamW per offloaded tensor with
    overlap, one without; a rank without offload has no hybrid times; the steps are real."""
    for overlap, optimizers in ((True, 3), (False, 1)):
        # bf16: the pristine tree's fp32 shards hit the seed defect.
        spec = case([param("a", [40], "bf16"), param("b", [24], "bf16"), param("c", [8], "bf16")],
                    cpu_offload=True,
                    offload_fraction=1.0, overlap_cpu_optimizer_d2h_h2d=overlap)
        worker.build(70, spec)
        assert worker("step", handle=70, grads=values_of(spec, 3), hyper=hyper(1e-2, 0.1, 1))["ok"]
        before = worker("observe", handle=70)["entries"]
        times = worker("time_steps", handle=70, steps=4)
        assert times["ok"], times
        whole, hdo, host = times["step_seconds"], times["hdo_seconds"], times["host_seconds"]
        assert len(whole) == len(hdo) == len(host) == 4, times
        assert all(0 < h <= d <= w for w, d, h in zip(whole, hdo, host)), times
        assert times["host_params"] == 72 and times["host_optimizers"] == optimizers, times
        after = worker("observe", handle=70)["entries"]
        assert all(e["state"]["step"] == 5 for group in after for e in group), after
        assert before != after
        assert worker("drop", handle=70)["ok"]
    spec = case([param("a", [40])])
    worker.build(71, spec)
    assert worker("step", handle=71, grads=values_of(spec, 3), hyper=hyper(1e-2, 0.1, 1))["ok"]
    times = worker("time_steps", handle=71, steps=2)
    assert len(times["step_seconds"]) == 2 and times["hdo_seconds"] == [], times
    assert times["host_params"] == 0 and times["host_optimizers"] == 0, times
    assert worker("drop", handle=71)["ok"]


def main():
    import test_worker_wrappers as wrapper_checks  # it imports this module's helpers
    tree = os.path.abspath(sys.argv[1])
    worker = Worker(tree)
    checks = [
        ("start-up, not_a_tree, api_moved", lambda: check_start_up(tree, worker)),
        ("seed defect", lambda: check_seed(worker)),
        ("PR #6982 fix", lambda: check_fix(tree)),
        ("mixed bf16/fp16/fp32 steps, dp 2", lambda: check_mixed_steps(worker)),
        ("hybrid optimizer placement, 16-bit params", lambda: check_offload(worker)),
        ("set/reload/zero_grad/drop/errors, TE stand-in", lambda: check_requests(worker)),
        ("buffers without a pg_collection: parallel_state's groups", lambda:
         check_parallel_state(worker)),
        ("TE stand-in arithmetic", check_te_arithmetic),
        ("distributed checkpoint: the save plan's coverage checked", check_plan_validation),
        ("loss scaler: skip on inf/NaN here or elsewhere, unscaled step", lambda:
         check_loss_scaler(worker)),
        ("clipping and zero count through the grad-stats stand-in, loss-scaled too", lambda:
         check_grad_stats(worker)),
        ("stream-order checker: F6's race, asked only where built", lambda:
         check_stream_races(worker)),
        ("binary values: the list encoding's answers, bit for bit", lambda:
         check_binary_values(tree, worker)),
        ("time_steps: whole, hybrid and host step times, one host AdamW per tensor with overlap",
         lambda: check_time_steps(worker)),
        ("non-distributed optimizers and stubs as the trainer drives them", lambda:
         wrapper_checks.check_wrapper_lifecycle(worker)),
        ("the dense and the experts' distributed optimizers chained over one DDP chunk", lambda:
         wrapper_checks.check_distributed_chain(worker)),
        ("DDP's param all-gather overlapped with the forward pass equals it after the step",
         lambda: wrapper_checks.check_overlap_training(worker)),
        ("quit and end of input", lambda: check_quit(tree)),
    ]
    only = sys.argv[2] if len(sys.argv) > 2 else ""  # run only the checks naming it
    for name, check in checks:
        if only not in name:
            continue
        started = time.perf_counter()
        check()
        print(f"ok  {name} ({time.perf_counter() - started:.2f} s)")
    small = time_small_case(worker)
    assert worker.finish() == 0
    print(f"start-up {worker.start_up_s:.2f} s; build + 2 steps + observe of a small case "
          f"{1000 * small:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
