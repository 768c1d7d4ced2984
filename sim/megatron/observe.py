"""What the worker reports of a rank, meaning exactly what the port's RankRig reports
(sim/rig/rank_under_test.h): the construction, each installed entry's pieces, optimizer state and
placement, the model values and the groups' hyper-parameters."""

import torch

from devices import is_accelerator
from rank import DTYPE_NAMES, LEAF_ERROR, nbytes, to_bits
from te_stand_in import join_remainder


def _range(r):
    return [r.start, r.end]


# ---- construction ----

def construction(rank):
    """The build reply's observation."""
    reply = {"error": None, "error_type": "", "failing_param": -1, "ranges": [], "groups": [],
             "index_map": [], "final_groups_match": True, "offloaded_tensors": 0,
             "accel_bytes": 0, "host_bytes": 0}
    if rank.handed_over():
        reply["ranges"] = ranges(rank)
        reply["groups"] = groups(rank)
        reply["index_map"] = index_map(rank)
    if rank.error is not None:
        reply["error"] = str(rank.error)
        reply["error_type"] = type(rank.error).__name__
        if isinstance(rank.error, ValueError) and str(rank.error) == LEAF_ERROR:
            reply["failing_param"] = first_non_leaf(reply["groups"])
    else:
        reply.update(constructed(rank))
    return reply


def ranges(rank):
    """gbuf_ranges after filtering: per buffer, per bucket, this rank's world range and the
    param ranges in param_map order."""
    d = rank.built
    out = []
    for buffer, gbuf_range in zip(d.buffers, d.gbuf_ranges):
        (param_dtype, grad_dtype), buckets = next(iter(gbuf_range.items()))
        out.append({"param_dtype": DTYPE_NAMES.get(param_dtype, str(param_dtype)),
                    "grad_dtype": DTYPE_NAMES.get(grad_dtype, str(grad_dtype)),
                    "is_expert": rank.expert,
                    "buckets": [bucket_ranges(rank, buffer, bucket, record)
                                for bucket, record in zip(buffer.buckets, buckets)]})
    return out


def bucket_ranges(rank, buffer, bucket, record):
    # This rank's world range: where the reduce-scatter writes its shard of the bucket.
    shard = rank.megatron.shard_buffer(bucket.grad_data, buffer.data_parallel_group.size())
    mine = shard[buffer.data_parallel_group.rank()]
    start = mine.storage_offset() - buffer.grad_data.storage_offset()
    params = [{"param": rank.case_param(p), "gbuf_world": _range(r["gbuf_world"]),
               "gbuf_world_in_bucket": _range(r["gbuf_world_in_bucket"]),
               "gbuf_local": _range(r["gbuf_local"]), "param_range": _range(r["param"])}
              for p, r in record["param_map"].items()]
    out = {"world": [start, start + mine.numel()], "params": params}
    if hasattr(bucket, "param_to_index"):
        out["param_index"] = sorted(
            ([rank.case_param(p), start, end] for p, (start, end) in bucket.param_to_index.items()),
            key=lambda row: row[1])
    return out


def groups(rank):
    return [[observe_tensor(rank, tensor, model) for tensor, model in group]
            for group in rank.installed()]


def observe_tensor(rank, tensor, model):
    out = {"param": rank.case_param(model), "dtype": "fp32", "numel": 0, "is_leaf": False,
           "requires_grad": False, "has_grad_fn": False, "aliases_model": False,
           "alias_offset": -1, "model_has_main_param": False}
    if tensor is None:
        return out
    offset = alias_offset(tensor, model)
    out.update({"dtype": DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype)),
                "numel": tensor.numel(), "is_leaf": tensor.is_leaf,
                "requires_grad": tensor.requires_grad, "has_grad_fn": tensor.grad_fn is not None,
                "aliases_model": offset >= 0, "alias_offset": offset,
                "model_has_main_param": getattr(model, "main_param", None) is tensor})
    return out


def alias_offset(tensor, model):
    """Element offset of `tensor` inside the model parameter's storage, or -1."""
    storage, model_storage = tensor.untyped_storage(), model.untyped_storage()
    if tensor.dtype != model.dtype or storage.data_ptr() != model_storage.data_ptr():
        return -1
    offset = (tensor.data_ptr() - model.data_ptr()) // tensor.element_size()
    return offset if 0 <= offset and offset + tensor.numel() <= model.numel() else -1


def index_map(rank):
    rows = [[rank.case_param(p), g, i]
            for p, (g, i) in rank.built.model_param_group_index_map.items()]
    return sorted(rows)


def first_non_leaf(observed_groups):
    for group in observed_groups:
        for t in group:
            if not t["is_leaf"]:
                return t["param"]
    return -1


def constructed(rank):
    """After a successful construction: whether the optimizer holds exactly the installed tensors,
    the bytes on each side, and the hybrid optimizer's host_min_numel where it has one."""
    installed = rank.installed()
    held = [group["params"] for group in rank.dist.optimizer.param_groups]
    match = len(held) == len(installed) and all(
        len(h) == len(g) and all(a is t for a, (t, _) in zip(h, g))
        for h, g in zip(held, installed))
    accel = sum(nbytes(b.grad_data) + (nbytes(b.param_data) if b.param_data is not None else 0)
                for b in rank.dist.buffers)
    host, offloaded = 0, 0
    hdo = rank.hdo()
    for group in installed:
        for tensor, model in group:
            if alias_offset(tensor, model) < 0:
                accel += nbytes(tensor)  # fp32 main param of a 16-bit param
            if hdo is None:
                continue
            inner = hdo.param_to_inner_param[tensor]
            if tensor in hdo.gpu_params_map_cpu_copy:
                offloaded += 1
                host += nbytes(inner)
            elif inner is not tensor:
                accel += nbytes(inner)  # fp32 copy of a 16-bit shard
    out = {"final_groups_match": match, "offloaded_tensors": offloaded, "accel_bytes": accel,
           "host_bytes": host}
    # Proposal S1 (FINDINGS.md) groups the host sub-optimizers by this many elements.
    min_numel = getattr(hdo, "overlap_cpu_optimizer_min_numel", None)
    if min_numel is not None:
        out["host_min_numel"] = int(min_numel)
    return out


# ---- after construction ----

def observation(rank, with_model_values=True):
    """The observe reply; every model parameter's values only when asked."""
    rank.require_constructed()
    hdo = rank.hdo()
    return {
        "entries": [[entry(rank, hdo, tensor, model) for tensor, model in group]
                    for group in rank.installed()],
        "model_values": [to_bits(p) for p in rank.params] if with_model_values else [],
        "hyper": hyper(rank),
        "num_cpu_optimizers": len(hdo.cpu_optimizers) if hdo is not None else 0,
        "has_accelerator_optimizer": hdo is not None and hdo.gpu_optimizer is not None,
    }


def entry(rank, hdo, tensor, model):
    piece = rank.dist._get_model_param_range_map(model)["param"]
    stepped = hdo.param_to_inner_param[tensor] if hdo is not None else master_of(rank, tensor)
    return {"model_piece": to_bits(model.detach().view(-1)[piece.start:piece.end]),
            "optimizer_piece": to_bits(stepped),
            "state": state(rank, hdo, tensor),
            "placement": placement(hdo, tensor)}


def master_of(rank, tensor):
    """The fp32 values the inner optimizer steps for `tensor`: TE's FusedAdam keeps a master (whole,
    or the remainder bits below a bf16 parameter) for 16-bit tensors; otherwise the tensor."""
    fused = rank.fused_adam()
    s = fused.state.get(tensor, {}) if fused is not None and tensor in fused.state else {}
    if "master_param" not in s or tensor.dtype == torch.float32:
        return tensor
    master = s["master_param"]
    return join_remainder(tensor, master) if master.dtype == torch.int16 else master


def group_step(optimizer, param):
    """The step count TE's FusedAdam keeps in the group holding `param` (0 before the first)."""
    for group in optimizer.param_groups:
        if any(p is param for p in group["params"]):
            return group.get("step", 0)
    return 0


def state(rank, hdo, tensor):
    """The optimizer state of one installed tensor: the HDO's (as synced after its step), else the
    inner optimizer's; master is what the optimizer steps. TE's FusedAdam keeps no step per
    tensor: its group's count is the step."""
    states = hdo.state if hdo is not None else rank.dist.optimizer.state
    s = states.get(tensor) if tensor in states else None
    if not s:
        return {"present": False, "exp_avg": [], "exp_avg_sq": [], "master": [], "step": 0}
    master = s["master_param"] if hdo is not None else master_of(rank, tensor)
    if "step" in s:
        step = s["step"]
    elif hdo is not None:
        step = group_step(hdo.gpu_optimizer, hdo.param_to_inner_param[tensor])
    else:
        step = group_step(rank.dist.optimizer, tensor)
    return {"present": True, "exp_avg": to_bits(s["exp_avg"]),
            "exp_avg_sq": to_bits(s["exp_avg_sq"]), "master": to_bits(master),
            "step": int(step.item() if isinstance(step, torch.Tensor) else step)}


def placement(hdo, tensor):
    """Where the hybrid optimizer put one installed tensor (defaults without it)."""
    out = {"offloaded": False, "fp32_copy": False, "host_pinned": False, "cpu_optimizer": -1,
           "stepped_on_host": False, "state_on_host": {}}
    if hdo is None:
        return out
    inner = hdo.param_to_inner_param[tensor]
    offloaded = tensor in hdo.gpu_params_map_cpu_copy
    cpu_optimizer = next((k for k, o in enumerate(hdo.cpu_optimizers)
                          if any(p is inner for g in o.param_groups for p in g["params"])), -1)
    s = hdo.state.get(tensor, {}) if tensor in hdo.state else {}
    out.update({"offloaded": offloaded, "fp32_copy": tensor in hdo.param_to_fp32_param,
                "host_pinned": offloaded and inner.is_pinned(), "cpu_optimizer": cpu_optimizer,
                "stepped_on_host": not is_accelerator(inner),
                "state_on_host": {k: not is_accelerator(v) for k, v in s.items()
                                  if isinstance(v, torch.Tensor) and k != "step"}})
    return out


def hyper(rank):
    return [{"lr": g["lr"], "beta1": g["betas"][0], "beta2": g["betas"][1], "eps": g["eps"],
             "weight_decay": g["weight_decay"]} for g in rank.dist.optimizer.param_groups]
