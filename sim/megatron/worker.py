"""The `megatron` system under test: a long-lived worker that runs Megatron-Core's own optimizer
code from a tree and answers requests, one JSON object per line on stdin and stdout
(docs/megatron-worker.md). Nothing but replies goes to stdout; the log goes to stderr.

    $(scripts/python-env) sim/megatron/worker.py --tree TREE [--device cpu|cuda]
"""

import argparse
import json
import math
import os
import sys
import time
import traceback
import warnings

sys.dont_write_bytecode = True  # leaves no __pycache__ in this repository or in the tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import checkpoint  # noqa: E402
import dist_checkpoint  # noqa: E402
import dp_zero  # noqa: E402
import grad_norm  # noqa: E402
import overlap  # noqa: E402
import devices  # noqa: E402
import rank  # noqa: E402
import observe  # noqa: E402
import stream_order  # noqa: E402
import training  # noqa: E402
import world as worlds  # noqa: E402
import wrappers  # noqa: E402
from loader import STAND_INS as LOADER_STAND_INS, Megatron, TreeError  # noqa: E402
from rank import STAND_INS as RANK_STAND_INS, Blob, Rank, from_bits  # noqa: E402
from te_stand_in import StandInRefused  # noqa: E402


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="a Megatron-LM tree (holds megatron/core)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--values", choices=("list", "base64", "binary"), default="list",
                        help="how replies carry tensor values (docs/megatron-worker.md)")
    parser.add_argument("--world-size", type=int, default=0,
                        help="join a world of this many real ranks (world.py)")
    parser.add_argument("--world-rank", type=int, default=0, help="this worker's rank in it")
    parser.add_argument("--master", default="127.0.0.1:29500",
                        help="ADDR:PORT of the rendezvous (rank 0 holds it)")
    parser.add_argument("--collective-timeout", type=float, default=60.0,
                        help="seconds a rendezvous or collective waits for the other ranks")
    return parser.parse_args()


def make_world(arguments):
    """The world this worker joins, or None (one process, DP ranks emulated)."""
    if arguments.world_size <= 0:
        return None
    try:
        return worlds.World(arguments.world_rank, arguments.world_size, arguments.master,
                            arguments.collective_timeout)
    except ValueError as e:
        raise TreeError("bad_world", str(e)) from e


def set_up(device, world=None):
    """Installs what this machine lacks and joins `world`; returns the stand-ins, in words."""
    stand_ins = []
    if device == "cpu":
        stand_ins += devices.install_cuda_stand_in()
    elif not torch.cuda.is_available():
        raise TreeError("import_failed", "--device cuda, but torch.cuda.is_available() is false")
    try:
        stand_ins += devices.install_distributed(world)
    except (RuntimeError, ValueError) as e:  # a rendezvous that timed out or was refused
        raise TreeError("world_failed", " ".join(str(e).split())[:400]) from e
    # The DP ranks: emulated in this process (DDP's buffers rebuilt outside training mode, no
    # collective), or real ranks of a world, which run DDP itself and its collectives.
    ranks = (RANK_STAND_INS + training.ONE_PROCESS_STAND_INS + wrappers.STAND_INS
             if world is None
             else worlds.STAND_INS)
    return stand_ins + LOADER_STAND_INS + training.STAND_INS + ranks


class Worker:
    """Serves requests against one loaded tree; keeps the ranks it built by handle."""

    def __init__(self, megatron, world=None):
        self.megatron = megatron
        self.world = world
        self.ranks = {}
        self.checkpoints = {}
        # (handle, checker): the rank built with check_stream_order. While it lives, every
        # request runs under the checker, so that it sees every allocation and access.
        self.stream_check = (None, None)

    def serve(self, request):
        op = request.get("op")
        handler = getattr(self, "op_" + str(op), None)
        if handler is None:
            raise ValueError(f"unknown op {op!r}")
        with stream_order.recording(self.stream_check[1]):
            return handler(request) or {}

    def rank(self, request):
        handle = request["handle"]
        if handle not in self.ranks:
            raise KeyError(f"no rank with handle {handle}")
        rank = self.ranks[handle]
        self.megatron.use_transformer_engine(rank.transformer_engine)
        return rank

    def refuse_on_real_ranks(self, op):
        if self.world is not None:
            raise ValueError(f"{op}: served on emulated ranks only; on real ranks the stand-in "
                             "that simulates the other ranks would be real ranks (world.py)")

    def op_collective_counts(self, request):
        if self.world is None:
            raise ValueError("collective_counts: served on real ranks only (--world-size)")
        return {"groups": self.world.collective_counts()}

    def op_build(self, request):
        if request.get("check_stream_order", False):
            if torch.cuda.Stream is not devices.Stream:
                raise ValueError("check_stream_order: CUDA runs the streams here; the checker "
                                 "works on the host stand-in (--device cpu)")
            self.stream_check = (request["handle"], stream_order.StreamOrderChecker())
        try:
            if self.world is not None:
                self.world.check(request)
            rank = Rank(self.megatron, request, self.world)
        except BaseException:  # no rank: nothing will drop it and end the checking
            if self.stream_check[0] == request["handle"]:
                self.stream_check = (None, None)
            raise
        self.ranks[request["handle"]] = rank
        return observe.construction(rank)

    def op_step(self, request):
        rank = self.rank(request)
        rank.require_constructed()
        grads = [from_bits(bits) for bits in request["grads"]]
        if request.get("main_grads_from_backward", False):
            if not rank.training:
                raise ValueError('step: main_grads_from_backward needs a rank built with '
                                 '"training": true')
        else:
            with torch.no_grad():
                for param, case_index in zip(rank.params, rank.case_index):
                    param.main_grad.view(-1).copy_(grads[case_index])
        for group, case_group in zip(rank.dist.param_groups, rank.group_ids):
            h = request["hyper"][case_group]
            group.update(lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                         weight_decay=h["weight_decay"])
        rank.stats_group.found_inf_elsewhere = bool(request.get("found_inf_elsewhere", False))
        rank.last_step = None  # a step that raises reports nothing
        scaler = rank.dist.grad_scaler
        rank.stats_group.begin_step(grads,
                                    scaler.inv_scale.clone() if scaler is not None else None)
        rank.last_step = rank.dist.step()

    def op_time_steps(self, request):
        """Times `steps` more steps of the rank's DistributedOptimizer with the main grads of its
        last step (for the benchmarks): each whole step and, where the inner optimizer is the
        HybridDeviceOptimizer, its own step within it and the steps of its host sub-optimizers
        (time.perf_counter around each call only). The host sub-optimizers' parameter count
        and the number of host sub-optimizers come with them."""
        rank = self.rank(request)
        rank.require_constructed()
        hdo = rank.hdo()
        timed = {"hdo": [], "host": []}
        wrapped = []

        def wrap(optimizer, key):
            original = optimizer.step

            def step(*args, **kwargs):
                t0 = time.perf_counter()
                out = original(*args, **kwargs)
                timed[key].append(time.perf_counter() - t0)
                return out
            optimizer.step = step
            wrapped.append(optimizer)

        host = []
        if hdo is not None:
            wrap(hdo, "hdo")
            host = list(hdo.cpu_optimizers)
            for optimizer in host:
                wrap(optimizer, "host")
        seconds = []
        try:
            for _ in range(int(request["steps"])):
                t0 = time.perf_counter()
                rank.dist.step()
                seconds.append(time.perf_counter() - t0)
        finally:
            for optimizer in wrapped:
                del optimizer.step  # the class's own step again
        per_step = max(1, len(host))
        return {"step_seconds": seconds, "hdo_seconds": timed["hdo"],
                "host_seconds": [sum(timed["host"][k:k + per_step])
                                 for k in range(0, len(timed["host"]), per_step)],
                "host_params": sum(p.numel() for o in host for g in o.param_groups
                                   for p in g["params"]),
                "host_optimizers": len(host)}

    def op_use_grad_stats(self, request):
        """The config's `clip_grad` and `log_num_zeros_in_grad`, set after construction (the
        step reads them from the shared config); the grad-stats group becomes the stand-in, given
        every rank's shards ([case param index, start, end] in its groups' order) to simulate the
        other ranks' shares."""
        self.refuse_on_real_ranks("use_grad_stats")
        rank = self.rank(request)
        rank.require_constructed()
        rank.dist.config.clip_grad = float(request["clip_grad"])
        rank.dist.config.log_num_zeros_in_grad = bool(request["log_num_zeros_in_grad"])
        case = rank.case
        dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

        def grad_dtype(index):
            if case["grad_reduce_in_fp32"]:
                return torch.float32
            return dtypes[case["params"][index]["dtype"]]

        shards = [[(i, start, end, grad_dtype(i)) for i, start, end in ranks]
                  for ranks in request["shards"]]
        rank.stats_group.use_grad_stats(self.megatron.clip_grads, shards,
                                        bool(case["precision_aware"]), float(request["clip_grad"]))
        rank.dist.grad_stats_parallel_group = rank.stats_group

    def op_last_step(self, request):
        """What the last step returned: (success, grad_norm, num_zeros_in_grad)."""
        result = getattr(self.rank(request), "last_step", None)
        if result is None:
            raise ValueError("last_step: no step yet")
        success, grad_norm, num_zeros = result
        # JSON has no inf or NaN (inf or NaN grads; Megatron's local norm fallback keeps an fp16
        # grad's norm in fp16, which overflows past 65504): those go as text.
        norm = None if grad_norm is None else float(grad_norm)
        if norm is not None and not math.isfinite(norm):
            norm = repr(norm)
        return {"success": bool(success), "grad_norm": norm,
                "num_zeros_in_grad": None if num_zeros is None else int(num_zeros)}

    def op_use_grad_scaler(self, request):
        """The loss scaler Megatron's factory hands the distributed optimizer for fp16 or
        `--loss-scale`, set after construction as the constructor would have set it (the scaler
        and its `found_inf` tensor); the grad-stats group becomes the stand-in that simulates the
        other DP ranks' found-inf flags."""
        self.refuse_on_real_ranks("use_grad_scaler")
        rank = self.rank(request)
        rank.require_constructed()
        c = request["config"]
        module = self.megatron.factory_module
        if c["dynamic"]:
            scaler = module.DynamicGradScaler(
                initial_scale=c["initial_scale"], min_scale=c["min_scale"],
                growth_factor=c["growth_factor"], backoff_factor=c["backoff_factor"],
                growth_interval=c["growth_interval"], hysteresis=c["hysteresis"])
        else:
            scaler = module.ConstantGradScaler(c["initial_scale"])
        rank.dist.grad_scaler = scaler
        rank.dist.found_inf = torch.tensor([0.0], dtype=torch.float, device="cuda")
        rank.dist.grad_stats_parallel_group = rank.stats_group

    def op_grad_scaler_state(self, request):
        scaler = self.rank(request).dist.grad_scaler
        if scaler is None:
            return {"present": False}
        return {"present": True, "scale": float(scaler.scale.item()),
                "growth_tracker": int(getattr(scaler, "_growth_tracker", 0)),
                "hysteresis_tracker": int(getattr(scaler, "_hysteresis_tracker", 0))}

    def op_set_model_values(self, request):
        rank = self.rank(request)
        values = request["values"]
        if len(values) != len(rank.params):
            raise ValueError(f"{len(values)} value lists for {len(rank.params)} parameters")
        with torch.no_grad():
            for param, bits in zip(rank.params, values):
                param.detach().view(-1).copy_(from_bits(bits))

    def op_backward(self, request):
        """Training mode: the case's grads delivered by a forward and backward pass through each
        chunk's DistributedDataParallel (training.backward)."""
        return training.backward(self.rank(request), request["grads"])

    def op_zero_grad(self, request):
        """In training mode first each chunk DDP's zero_grad_buffer(), as train_step does."""
        rank = self.rank(request)
        rank.require_constructed()
        if rank.training:
            training.zero_grad_buffers(rank)
        rank.dist.zero_grad(set_to_none=request.get("set_to_none", True))

    def op_reload_model_params(self, request):
        rank = self.rank(request)
        rank.require_constructed()
        rank.dist.reload_model_params()

    def op_observe(self, request):
        return observe.observation(self.rank(request), request.get("model_values", True))

    def op_save(self, request):
        self.checkpoints[request["checkpoint"]] = checkpoint.save(self.rank(request))

    def op_load(self, request):
        saved = self.checkpoints.get(request["checkpoint"])
        if saved is None or isinstance(saved, (dist_checkpoint.Saved, dp_zero.Saved)):
            raise KeyError(f"no checkpoint {request['checkpoint']}")
        checkpoint.load(self.rank(request), saved, request.get("map_to_host", False))

    def op_save_distributed(self, request):
        """Adds the rank's part to the distributed checkpoint of its DP group (dist_checkpoint.py),
        made by the group's first save."""
        saved = self.checkpoints.setdefault(request["checkpoint"], dist_checkpoint.Saved())
        if not isinstance(saved, dist_checkpoint.Saved):
            raise KeyError(f"checkpoint {request['checkpoint']} is not a distributed one")
        dist_checkpoint.save(self.rank(request), saved)

    def op_load_distributed(self, request):
        saved = self.checkpoints.get(request["checkpoint"])
        if not isinstance(saved, dist_checkpoint.Saved):
            raise KeyError(f"no distributed checkpoint {request['checkpoint']}")
        dist_checkpoint.load(self.rank(request), saved)

    def op_save_dp_zero(self, request):
        """This real rank's part of its DP group's torch-format checkpoint (dp_zero.py)."""
        self.checkpoints[request["checkpoint"]] = dp_zero.save(self.rank(request))

    def op_load_dp_zero(self, request):
        saved = self.checkpoints.get(request["checkpoint"])
        if not isinstance(saved, dp_zero.Saved):
            raise KeyError(f"no torch-format checkpoint {request['checkpoint']}")
        dp_zero.load(self.rank(request), saved)

    def op_save_sharded(self, request):
        """Real ranks: this rank's part of its DP group's distributed checkpoint in the sharding
        type asked for, written to the group's shared directory (dist_checkpoint.py)."""
        dist_checkpoint.save_to(self.rank(request), request["directory"],
                                request["sharding_type"])

    def op_load_sharded(self, request):
        dist_checkpoint.load_from(self.rank(request), request["directory"])

    def op_add_non_tensor_state(self, request):
        dist_checkpoint.add_non_tensor_state(self.rank(request), list(request["keys"]))

    def op_drop_checkpoint(self, request):
        self.checkpoints.pop(request["checkpoint"], None)

    def op_stream_races(self, request):
        """The races the stream-order checker found since the rank was built."""
        handle, checker = self.stream_check
        if handle != request["handle"]:
            raise ValueError(f"rank {request['handle']} was built without check_stream_order")
        return {"races": list(checker.races)}

    def op_grad_norm(self, request):
        """Megatron's get_grad_norm_fp32 called directly on each rank of a group of emulated
        ranks, each with its own grads (grad_norm.py)."""
        self.refuse_on_real_ranks("grad_norm")
        return grad_norm.grad_norm(self.megatron.clip_grads, request["grads"],
                                   request["norm_type"])

    def op_wrapper_lifecycle(self, request):
        """The optimizer Megatron's factory builds without the distributed optimizer, or the stub
        of a frozen rank, driven as the trainer drives it (wrappers.py)."""
        self.refuse_on_real_ranks("wrapper_lifecycle")
        self.megatron.use_transformer_engine(bool(request["transformer_engine"]))
        return wrappers.lifecycle(self.megatron, request)

    def op_overlap_training(self, request):
        """Training steps with DDP's param all-gather overlapped with the forward pass, and
        without, over a one-member gloo group (overlap.py)."""
        self.refuse_on_real_ranks("overlap_training")
        self.megatron.use_transformer_engine(False)
        return overlap.overlap_training(self.megatron, request)

    def op_drop(self, request):
        self.ranks.pop(request["handle"], None)
        if self.stream_check[0] == request["handle"]:
            self.stream_check = (None, None)


def with_blobs(value, blob):
    """`value` with every {"blob": [offset, length]} replaced by those bytes of `blob`."""
    if isinstance(value, list):
        return [with_blobs(v, blob) for v in value]
    if not isinstance(value, dict):
        return value
    span = value.get("blob")
    if len(value) == 1 and isinstance(span, list) and len(span) == 2:
        start, length = int(span[0]), int(span[1])
        if start < 0 or length < 0 or start + length > len(blob):
            raise ValueError(f"blob span {span} outside the {len(blob)} bytes sent")
        return bytes(blob[start:start + length])
    return {k: with_blobs(v, blob) for k, v in value.items()}


def read_request(stream):
    """The next request from the binary `stream`: a JSON line and, when it says "blob_bytes": N,
    the N bytes after it; None at the end of input, a ValueError for a malformed one."""
    line = stream.readline()
    while line and not line.strip():
        line = stream.readline()
    if not line:
        return None
    request = json.loads(line)
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    size = request.pop("blob_bytes", 0)
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"blob_bytes {size!r} is not a byte count")
    blob = stream.read(size) if size else b""
    if len(blob) != size:
        raise ValueError(f"the input ended {size - len(blob)} bytes short of blob_bytes")
    return with_blobs(request, blob) if size else request


def reply_to(worker, request):
    """The reply to one request; whether the worker goes on."""
    reply = {"id": request.get("id"), "ok": True}
    if request.get("op") == "quit":
        return reply, False
    try:
        reply.update(worker.serve(request))
    except StandInRefused as e:
        reply = {"id": request.get("id"), "ok": False, "error": str(e), "traceback": ""}
    except Exception as e:
        reply = {"id": request.get("id"), "ok": False, "error": f"{type(e).__name__}: {e}",
                 "traceback": traceback.format_exc()}
    return reply, True


def encode(value):
    """`value` as its JSON line, with each Blob's bytes moved after it (--values binary): the
    line says "blob_bytes": N, and each value is {"blob": [offset, length]} into those N."""
    blobs, size = [], 0

    def blob_span(blob):
        nonlocal size
        if not isinstance(blob, Blob):
            raise TypeError(f"{type(blob).__name__} is not JSON")
        blobs.append(blob)
        size += len(blob)
        return {"blob": [size - len(blob), len(blob)]}

    line = json.dumps(value, separators=(",", ":"), allow_nan=False, default=blob_span)
    if blobs:
        line = '{"blob_bytes":%d,%s' % (size, line[1:])
    return (line + "\n").encode() + b"".join(blobs)


def write(out, value):
    try:
        message = encode(value)
    except ValueError as e:  # a value JSON cannot carry (NaN, infinity)
        message = encode({"id": value.get("id"), "ok": False, "error": f"ValueError: {e}",
                          "traceback": ""})
    out.write(message)
    out.flush()


def main():
    arguments = parse_arguments()
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything Megatron prints goes to the log
    if not sys.warnoptions:  # PYTHONWARNINGS or -W decide when given
        warnings.simplefilter("once")
    rank.VALUE_ENCODING = arguments.values
    tree = os.path.abspath(arguments.tree)
    try:
        world = make_world(arguments)
        stand_ins = set_up(arguments.device, world)
        megatron = Megatron(tree)
    except TreeError as e:
        write(out, {"ready": False, "kind": e.kind, "error": " ".join(str(e).split())})
        return 2
    hello = {"ready": True, "tree": tree, "torch": torch.__version__,
             "device": arguments.device, "stand_ins": stand_ins}
    if world is not None:
        hello["world"] = world.describe()
    write(out, hello)
    worker = Worker(megatron, world)
    going_on = True
    while going_on:
        try:
            request = read_request(sys.stdin.buffer)
        except ValueError as e:  # not JSON, or a blob that does not fit
            request, reply = None, {"id": None, "ok": False, "error": f"ValueError: {e}",
                                    "traceback": ""}
        else:
            if request is None:
                break
            reply, going_on = reply_to(worker, request)
        try:
            write(out, reply)
        except BrokenPipeError:  # the client went away: nobody to answer
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
