"""One rank of one instance of a case, built, stepped and observed with Megatron-Core's own code.

A rank is built as Megatron's training path builds it: each model chunk's DDP buffers (the buffer
creation of DistributedDataParallel.__init__, re-created here because DDP itself needs a model and
Megatron's process groups), then `_get_megatron_optimizer_based_on_param_groups`, which makes the
inner optimizer (torch.optim.AdamW, or the HybridDeviceOptimizer over torch.optim.AdamW) and the
DistributedOptimizer. The data-parallel group is a stand-in of the case's size seen from this rank;
no collective runs: the caller writes the reduced gradient into every rank's main_grad, and the
param all-gather after a step is left out (only this rank's own pieces are observed).
In training mode (a case with "training": true, training.py) each chunk is Megatron's own
DistributedDataParallel instead, and gradients arrive in main_grad through its hooks.
"""

import base64
import contextlib
import types

import numpy as np
import torch

import te_stand_in
from loader import PlaceholderCalled, parallel_groups

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
          "fp64": torch.float64}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
LEAF_ERROR = "can't optimize a non-leaf Tensor"
INNER_LR = 1e-3


STAND_INS = [
    "DistributedDataParallel (outside training mode): its buffer creation re-created with "
    "Megatron's own group_params_for_buffers, compute_full_param_layout, _ParamAndGradBuffer "
    "and partition_buckets; a model-chunk stand-in that starts no param all-gather after a step",
]


# How replies carry values: "list" (bit patterns as integers, readable), "base64" (the
# little-endian fp32 bytes in the JSON line) or "binary" (those bytes after the line, as Blob).
# Requests may use any of them.
VALUE_ENCODING = "list"


class Blob(bytes):
    """Little-endian fp32 bytes that travel after their message's JSON line (worker.write)."""


def from_bits(bits):
    """fp32 values from their bit patterns, base64 text or raw bytes, as a flat host tensor."""
    if isinstance(bits, (str, bytes)):
        raw = bits if isinstance(bits, bytes) else base64.b64decode(bits)
        return torch.from_numpy(np.frombuffer(raw, dtype="<f4").astype(np.float32, copy=True))
    return torch.from_numpy(np.asarray(bits, dtype=np.uint32).view(np.float32).copy())


def to_bits(tensor):
    """`tensor`'s values widened (or rounded, for fp64) to fp32, in VALUE_ENCODING."""
    host = tensor.detach().cpu().to(torch.float32).contiguous().view(-1)
    if VALUE_ENCODING == "list":
        return host.numpy().view(np.uint32).tolist()
    raw = host.numpy().astype("<f4", copy=False).tobytes()
    return Blob(raw) if VALUE_ENCODING == "binary" else base64.b64encode(raw).decode("ascii")


def nbytes(tensor):
    return tensor.numel() * tensor.element_size()


class GroupStandIn:
    """A process group of `size` ranks seen from `rank`, for data-parallel ranks emulated in one
    process.

    Contract, from c10d's ProcessGroup: a real group answers rank() and size() (this process's
    place in it, its member count) and runs collectives over its members on its backend (NCCL for
    Megatron's data-parallel and intra-optimizer groups: CUDA tensors, contiguous, one dtype).
    The stand-in answers rank() and size() as the case gives them, and runs no collective: torch
    refuses it (ValueError: a group absent from its world map) in all_reduce, broadcast,
    all_gather and the others, and in get_rank(group) / get_process_group_ranks(group). What
    Megatron would learn from a collective on a data-parallel group the worker supplies itself
    (the reduced grads written into main_grad; the param all-gather is left out)."""

    def __init__(self, size, rank):
        self._size, self._rank = size, rank

    def size(self):
        return self._size

    def rank(self):
        return self._rank


def _refuse_as_nccl(tensor):
    """What an NCCL all_reduce refuses before it reduces anything."""
    if not tensor.is_cuda:
        raise RuntimeError("an NCCL all_reduce takes CUDA tensors, not a tensor on "
                           f"{tensor.device}")
    if tensor.is_sparse or not tensor.is_contiguous():
        raise RuntimeError("an NCCL all_reduce takes dense contiguous tensors")


class GradStatsGroupStandIn(GroupStandIn):
    """The grad-stats group of the distributed optimizer. Every DP rank holds the same reduced
    grads, so the other ranks are simulated from them: the client states per step whether another
    rank's shards hold inf or NaN (`found_inf_elsewhere`), which a MAX all-reduce of the found-inf
    flag combines with this rank's own; and, once `use_grad_stats` gave it every rank's shards,
    a SUM all-reduce adds the other ranks' squared grad norms (fp32) or zero counts (int64),
    each computed with Megatron's own clip_grads functions over that rank's shards of the step's
    main grads, unscaled and clipped as its step would. Shares are added in rank order.

    Contract, from c10d's all_reduce on Megatron's grad-stats group (an NCCL group):
    - It refuses host tensors (NCCL has no host path), sparse and non-contiguous tensors. Same.
    - It reduces any dense tensor with SUM, MAX and the other ops, in place, every member
      receiving the result, synchronously or (async_op) with a Work to wait on. The stand-in
      reduces one element with MAX, and with SUM a norm (fp32) or a count (int64) once it has
      the grad stats; anything else, and async_op, is refused by name (StandInRefused).
    - NCCL's SUM order across ranks is its own (ring or tree); the stand-in adds in rank order,
      which can differ from NCCL's in the last bit of a norm."""

    def __init__(self, size, rank):
        super().__init__(size, rank)
        self.found_inf_elsewhere = False
        self.clip_grads = None  # Megatron's clip_grads module, once use_grad_stats ran
        self.shards = []  # per rank: [(case param index, start, end, grad dtype)]
        self.precision_aware = False
        self.clip_grad = 0.0
        self.grads, self.inv_scale, self.total_norm, self.others = [], None, None, {}

    def use_grad_stats(self, clip_grads, shards, precision_aware, clip_grad):
        self.clip_grads, self.shards = clip_grads, shards
        self.precision_aware, self.clip_grad = precision_aware, clip_grad

    def begin_step(self, grads, inv_scale):
        """The step's DP-reduced grads (fp32, one per case parameter) and the scaler's
        inv_scale (None without one)."""
        self.grads, self.inv_scale, self.total_norm = grads, inv_scale, None
        self.others = {}  # rank -> its main grads, made once a step

    def all_reduce(self, tensor, op):
        _refuse_as_nccl(tensor)
        if op == torch.distributed.ReduceOp.SUM and self.clip_grads is not None:
            self._sum(tensor)
            return
        if op != torch.distributed.ReduceOp.MAX or tensor.numel() != 1:
            raise te_stand_in.StandInRefused(
                "the grad-stats group stand-in reduces one flag with MAX, or, with grad stats, "
                "a norm or a count with SUM")
        if self.found_inf_elsewhere:
            tensor.fill_(max(float(tensor.item()), 1.0))

    def _main_grads(self, rank):
        """Fresh copies on the accelerator, as the rank's own grad buffer is: the unscale and the
        clipping below work in place, and a view would change the step's grads."""
        grads = []
        for index, start, end, dtype in self.shards[rank]:
            grad = self.grads[index][start:end].to(device="cuda", dtype=dtype, copy=True)
            grads.append(grad if self.precision_aware else grad.float())
        if self.inv_scale is not None:  # the kernel takes found_inf on the grads' device
            found_inf = torch.zeros(1, device="cuda")
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, self.inv_scale)
        return grads

    def _share(self, rank, is_norm):
        """The norm is reduced before the zero count, so the count may clip the same copies in
        place."""
        c = self.clip_grads
        if rank not in self.others:
            self.others[rank] = self._main_grads(rank)
        grads = self.others[rank]
        dummy = torch.zeros(1, dtype=torch.int)
        if is_norm:
            if not grads:
                return torch.zeros(1, dtype=torch.float)
            norm, _ = c.multi_tensor_applier(c.l2_norm_impl, dummy, [grads], False)
            return (norm ** 2.0).cpu()
        if self.total_norm is not None and self.clip_grad > 0.0:
            coeff = self.clip_grad / (self.total_norm + 1.0e-6)
            if coeff < 1.0:
                c.multi_tensor_applier(c.multi_tensor_scale_impl, dummy, [grads, grads], coeff)
        zeros = sum(grad.numel() - int(torch.count_nonzero(grad)) for grad in grads)
        return torch.tensor([zeros], dtype=torch.int64)

    def _sum(self, tensor):
        is_norm = tensor.dtype == torch.float
        total = torch.zeros(tensor.shape, dtype=tensor.dtype)
        for rank in range(self.size()):
            total += tensor.cpu() if rank == self.rank() else self._share(rank, is_norm)
        tensor.copy_(total)
        if is_norm:
            self.total_norm = float(total.item()) ** 0.5


class ModelChunk:
    """What DistributedOptimizer reads of a DDP-wrapped model chunk. The param all-gather it would
    start after a step is not run."""

    def __init__(self, ddp_config, buffers, expert_parallel_buffers, bucket_groups,
                 expert_parallel_bucket_groups):
        self.ddp_config = ddp_config
        self.buffers = buffers
        self.expert_parallel_buffers = expert_parallel_buffers
        self.bucket_groups = bucket_groups
        self.expert_parallel_bucket_groups = expert_parallel_bucket_groups

    def _start_bucket_group_param_sync(self, bucket_group, force_sync=False):
        pass


def ddp_bucket_size(ddp_config, dp_size):
    """DistributedDataParallel.__init__'s default bucket size, and none without overlapped
    grad reduction; written into the (shared) config as DDP does."""
    if ddp_config.bucket_size is None:
        ddp_config.bucket_size = max(40000000, 1000000 * dp_size)
    if not ddp_config.overlap_grad_reduce:
        ddp_config.bucket_size = None


class Rank:
    """One rank of one instance (dense or expert) of a case."""

    whole_params = False  # the distributed optimizer holds a piece of each parameter

    def __init__(self, megatron, request, world=None):
        self.megatron = megatron
        self.world = world  # world.py's World: a real rank, in training mode
        self.case = request["case"]
        self.expert = request["instance"] == "expert"
        self.rank = request["rank"]
        self.transformer_engine = self.case.get("transformer_engine", False)
        self.training = bool(self.case.get("training", False)) or world is not None
        megatron.use_transformer_engine(self.transformer_engine)
        specs = self.case["params"]
        self.case_index = [i for i, s in enumerate(specs) if s["is_expert"] == self.expert]
        self.group_ids = sorted({specs[i]["group"] for i in self.case_index})
        self.dp = self.case["expert_dp"] if self.expert else self.case["dp"]
        self.params = [self._make_param(specs[i], request["initial"][i]) for i in self.case_index]
        self.local = {id(p): k for k, p in enumerate(self.params)}
        self.group, self.dense_group, self.pg_collection = self._groups()
        self.stats_group = GradStatsGroupStandIn(self.dp, self.rank)
        self.ddp_config = self._make_ddp_config()
        self.model_chunks, self.per_model_buffers = self._make_chunks()
        self.dist, self.built, self.error = None, None, None
        self._construct(request["group_weight_decay"])

    # ---- building ----

    def _make_param(self, spec, bits):
        values = from_bits(bits).view(spec["shape"]).to(DTYPES[spec["dtype"]])
        param = torch.nn.Parameter(values.cuda())
        if spec.get("shared_embedding", False):
            param.shared_embedding = True
        if spec["is_expert"]:
            param.allreduce = False
        return param

    def _make_ddp_config(self):
        """One config shared by every chunk, as in training. DDP buckets only with overlapped
        grad reduction, so a case bucket size turns that on."""
        case = self.case
        config = self.megatron.DistributedDataParallelConfig(
            grad_reduce_in_fp32=case["grad_reduce_in_fp32"],
            overlap_grad_reduce=case["bucket_size"] is not None,
            use_distributed_optimizer=True,
            bucket_size=case["bucket_size"],
            pad_buckets_for_high_nccl_busbw=case["pad_for_high_nccl_busbw"],
        )
        ddp_bucket_size(config, self.case["dp"])
        return config

    def _groups(self):
        """This instance's data-parallel group (dense or expert DP), the dense one (DDP's
        dp_cp group) and a process-group collection with a one-rank tensor-parallel group; the
        world's real groups on a real rank."""
        if self.world is not None:
            dense = self.world.dense()
            group = self.world.expert(self.case["expert_dp"]) if self.expert else dense
        else:
            dense = GroupStandIn(self.case["dp"], self.rank % self.case["dp"])
            group = GroupStandIn(self.dp, self.rank)
        pg_collection = types.SimpleNamespace(tp=GroupStandIn(1, 0), dp_cp=dense)
        return group, dense, pg_collection

    def _make_chunks(self):
        """One model chunk per chunk holding parameters of this instance, in chunk order, and
        Megatron's per_model_buffers over them: in training mode Megatron's own
        DistributedDataParallel (training.py), else a DDP stand-in over the buffers DDP makes."""
        chunks = sorted({self.case["params"][i]["chunk"] for i in self.case_index})
        model_chunks, per_model_buffers = [], {}
        for index, chunk in enumerate(chunks):
            members = [k for k, i in enumerate(self.case_index)
                       if self.case["params"][i]["chunk"] == chunk]
            disable_bucketing = self.case["bucket_first_chunk_only"] and chunk > 0
            if self.training:
                import training  # training.py builds on this module's stand-ins and codecs
                wrapped = training.wrap_chunk(self, members, disable_bucketing,
                                              self._layout(members, disable_bucketing))
                buffers = wrapped.expert_parallel_buffers if self.expert else wrapped.buffers
            else:
                wrapped, buffers = self._chunk_stand_in(members, disable_bucketing)
            model_chunks.append(wrapped)
            per_model_buffers[index] = buffers
        return model_chunks, per_model_buffers

    def _chunk_stand_in(self, members, disable_bucketing):
        """The buffers DDP would make for one chunk's parameters and a DDP stand-in over them."""
        buffers = self._make_buffers(members, disable_bucketing)
        bucket_groups = self.megatron.partition_buckets(
            buffers, force_single_bucket_group=disable_bucketing)
        none = []
        if self.expert:
            return ModelChunk(self.ddp_config, none, buffers, none, bucket_groups), buffers
        return ModelChunk(self.ddp_config, buffers, none, bucket_groups, none), buffers

    def _layout(self, members, disable_bucketing):
        """The FullParamLayout of one chunk's parameters, as Megatron's callers compute it
        before making DDP's buffers."""
        bucket_size = None if disable_bucketing else self.ddp_config.bucket_size
        return self.megatron.DistributedOptimizer.compute_full_param_layout(
            [self.params[k] for k in members], bucket_size, self.dense_group.size(),
            self.ddp_config, expert_data_parallel_world_size=self.case["expert_dp"])

    def _make_buffers(self, members, disable_bucketing):
        """The buffers DistributedDataParallel.__init__ makes for one chunk's parameters; with
        the case's buffers_from_parallel_state, as a direct caller makes them: without a
        pg_collection, parallel_state initialized with the rank's groups."""
        m = self.megatron
        dense = self.dense_group
        bucket_size = None if disable_bucketing else self.ddp_config.bucket_size
        params = [self.params[k] for k in members]
        names = {p: self.case["params"][self.case_index[k]]["name"]
                 for k, p in zip(members, params)}
        layout = self._layout(members, disable_bucketing)
        buffers = []
        grouped = m.group_params_for_buffers(params, self.ddp_config.grad_reduce_in_fp32)
        from_state = bool(self.case.get("buffers_from_parallel_state", False))
        groups = None if from_state else self.pg_collection
        with (parallel_groups(m, dense, self.pg_collection.tp) if from_state
              else contextlib.nullcontext()):
            for key, (in_buffer, param_indices) in grouped.items():
                buffers.append(m._ParamAndGradBuffer(
                    self.ddp_config, key.param_dtype, key.grad_dtype,
                    [(p, names[p]) for p in in_buffer], self.group, bucket_size, names,
                    1.0 / dense.size(), param_indices, self.ddp_config.nccl_ub, groups,
                    param_layout=layout.layouts.get(key)))
        return buffers

    def _optimizer_config(self):
        case = self.case
        return self.megatron.OptimizerConfig(
            optimizer="adam", lr=INNER_LR, clip_grad=0.0, fp16=False,
            bf16=any(p["dtype"] == "bf16" for p in case["params"]),
            decoupled_weight_decay=True, use_distributed_optimizer=True,
            use_precision_aware_optimizer=case["precision_aware"],
            store_param_remainders=case["store_param_remainders"],
            optimizer_cpu_offload=case["cpu_offload"],
            optimizer_offload_fraction=case["offload_fraction"],
            overlap_cpu_optimizer_d2h_h2d=case["overlap_cpu_optimizer_d2h_h2d"],
        )

    def _param_groups(self, weight_decays):
        """One group per case group of this instance, ascending, with the identifier keys the
        port gives them."""
        groups = []
        for g in self.group_ids:
            members = [p for p, i in zip(self.params, self.case_index)
                       if self.case["params"][i]["group"] == g]
            decay = weight_decays[g]
            groups.append({"params": members, "weight_decay": decay,
                           "wd_mult": 1.0 if decay > 0 else 0.0, "lr_mult": 1.0 + g,
                           "is_expert_parallel": self.expert, "is_decoupled_lr": False})
        return groups

    def _construct(self, weight_decays):
        """Megatron's factory: the inner optimizer, then the DistributedOptimizer. What it raises
        is the construction's outcome; the half-built DistributedOptimizer is kept to observe."""
        try:
            self.dist = self.megatron._get_megatron_optimizer_based_on_param_groups(
                self._optimizer_config(), self.model_chunks, self._param_groups(weight_decays),
                per_model_buffers=self.per_model_buffers, data_parallel_group=self.group,
                data_parallel_group_gloo=self.group if self.world is not None else None,
                data_parallel_group_idx=0,
                intra_dist_opt_group=self.group, distributed_optimizer_instance_id=0,
                pg_collection=self.pg_collection)
            self.built = self.dist
        except PlaceholderCalled:
            raise
        except Exception as e:
            self.built = self._constructing(e.__traceback__)
            self.error = e.with_traceback(None)  # frees the frames

    def _constructing(self, traceback):
        """The DistributedOptimizer whose __init__ raised, from the traceback's frames."""
        code = self.megatron.DistributedOptimizer.__init__.__code__
        found = None
        while traceback is not None:
            if traceback.tb_frame.f_code is code:
                found = traceback.tb_frame.f_locals.get("self")
            traceback = traceback.tb_next
        return found

    # ---- what construction installed ----

    def handed_over(self):
        """Whether construction got as far as handing the groups to the inner optimizer."""
        return self.built is not None and hasattr(self.built, "shard_fp32_from_float16_groups")

    def installed(self):
        """Per group, (tensor, model param) in installed order."""
        d = self.built
        out = []
        for g, group_range in enumerate(d.opt_group_ranges):
            models = [*d.model_fp32_groups[g], *d.model_float16_groups[g]]
            out.append(list(zip(group_range["orig_group"]["params"], models)))
        return out

    def hdo(self):
        if self.dist is None:
            return None
        inner = self.dist.optimizer
        return inner if isinstance(inner, self.megatron.HybridDeviceOptimizer) else None

    def fused_adam(self):
        """The inner optimizer when it is TE's FusedAdam (the precision-aware optimizer)."""
        inner = self.dist.optimizer if self.dist is not None else None
        return inner if isinstance(inner, te_stand_in.FusedAdam) else None

    def require_constructed(self):
        if self.dist is None:
            raise RuntimeError("construction failed: " + repr(self.error))

    def case_param(self, model_param):
        return self.case_index[self.local[id(model_param)]]
