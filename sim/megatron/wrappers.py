"""The optimizers Megatron's factory builds, driven as the trainer drives them: what the
worker's `wrapper_lifecycle` op serves (sim/rig/wrapper_call.h).

`get_megatron_optimizer` builds, through `_get_megatron_optimizer_based_on_param_groups`, one
optimizer for the dense parameters (a stub where none is trainable: a frozen pipeline stage) and,
where expert parameters are trainable, one for them, and chains them (ChainedOptimizer, always,
even over one). Each wraps the inner optimizer in Float16OptimizerWithFloat16Params (bf16, or fp16
with the dynamic loss scaler the factory gives it, without the distributed optimizer),
FP32Optimizer (neither bf16 nor fp16) or the DistributedOptimizer (over the buffers of the one
DDP chunk, Megatron's own DistributedDataParallel, which the dense and the experts' optimizers
share); a stub is of the wrapper the options ask for. The trainer steps the chain; saves a
distributed checkpoint (the model's sharded state dict and, unless the chain is a stub, the
chain's); and a fresh rank resumes from it: the weights loaded, then the optimizer state
(`sharded_state_dict(is_loading=True)`, `load_state_dict`), or, finetuning or with
--no-load-optim, no optimizer state and `reload_model_params()`, or, with
--load-main-params-from-ckpt, `reload_model_params(state_dict)` of the loaded state dict; then it
steps on.

One rank holds whole parameters (a DP group of one), their main_grad an fp32 tensor of the
parameter's shape that the caller fills before each step (DDP's grad buffer with
grad_reduce_in_fp32). The process groups have one member (OneRankGroup). Without clipping the
only collectives are the chain's grad-norm all-reduce and, with fp16, the loss scaler's found-inf
all-reduce, which over one member leave the tensor as it is.
"""

import types

import torch

import dist_checkpoint
import training
from rank import DTYPES, INNER_LR, ModelChunk, _refuse_as_nccl, from_bits, to_bits

WEIGHT_DECAY = 0.01
STAND_INS = [
    "the model-parallel group of the non-distributed optimizers (wrapper_lifecycle): one member; "
    "its all-reduce leaves the tensor as it is, as every reduction over one member does",
    "the non-distributed optimizers (wrapper_lifecycle): one rank with whole parameters, each "
    "with an fp32 main_grad the request fills (DDP's grad buffer with grad_reduce_in_fp32), no "
    "model chunks and no DDP buffers (the factory gives a non-distributed or stub optimizer "
    "none); the distributed checkpoint held in memory as for the distributed optimizer "
    "(dist_checkpoint.py)",
    "the distributed optimizers of wrapper_lifecycle: one rank of a DP group of one, its model "
    "chunk Megatron's own DistributedDataParallel over a module of every parameter, its process "
    "groups one-member groups; the param all-gather DDP starts after a step is not run (over one "
    "member it leaves the param buffer as it is); the reduced gradients are the request's, "
    "written into DDP's grad buffer (main_grad)",
]


class OneRankGroup:
    """A process group of one member.

    Contract, from c10d: a group answers rank() and size(); an all-reduce over one member leaves
    its tensor as it is, whatever the op; NCCL (the model-parallel groups' backend) refuses host,
    sparse and non-contiguous tensors. The stand-in answers 0 and 1 and all-reduces in place,
    refusing what NCCL refuses (rank._refuse_as_nccl)."""

    def size(self):
        return 1

    def rank(self):
        return 0

    def all_reduce(self, tensor, op=None):
        _refuse_as_nccl(tensor)


class WrapperRank:
    """What dist_checkpoint.py reads of a rank, for a non-distributed or stub optimizer: one
    rank, whole parameters, named p0, p1, ... as the request lists them."""

    whole_params = True

    def __init__(self, megatron, request, initial):
        self.megatron = megatron
        self.request = request
        self.world, self.rank, self.expert = None, 0, False
        specs = request["params"]
        self.case = {"params": [{"name": f"p{i}"} for i in range(len(specs))]}
        self.case_index = list(range(len(specs)))
        self.params = [self._make_param(spec, bits) for spec, bits in zip(specs, initial)]
        self.config, self.chunk = self._config(), self._chunk()  # one of each, as in training
        self.dist = self._build()

    def _make_param(self, spec, bits):
        values = from_bits(bits).view(spec["shape"]).to(DTYPES[spec["dtype"]])
        param = torch.nn.Parameter(values.cuda(), requires_grad=not self.request["frozen"])
        param.main_grad = torch.zeros(param.shape, dtype=torch.float32, device="cuda")
        if spec.get("is_expert", False):
            param.allreduce = False  # how DDP tells an expert parameter (expert buffers)
        return param

    def _config(self):
        """The options: fp16 brings the factory's dynamic loss scaler (its defaults)."""
        wrapper = self.request["wrapper"]
        return self.megatron.OptimizerConfig(
            optimizer="adam", lr=INNER_LR, weight_decay=WEIGHT_DECAY, clip_grad=0.0,
            fp16=wrapper == "fp16", bf16=wrapper in ("float16", "distributed"),
            decoupled_weight_decay=True, use_distributed_optimizer=wrapper == "distributed")

    def _build(self):
        """The chain get_megatron_optimizer builds: the dense optimizer always (no param groups,
        so a stub, where no dense parameter is trainable: Megatron's `_get_param_groups` leaves
        out parameters that do not require grad), then the experts' where one is trainable."""
        specs = self.request["params"]
        optimizers = []
        for expert in (False, True):
            trainable = [p for p, s in zip(self.params, specs)
                         if p.requires_grad and s.get("is_expert", False) == expert]
            if expert and not trainable:
                break
            optimizers.append(self._optimizer(trainable, expert))
        return self.megatron.factory_module.ChainedOptimizer(optimizers)

    def _optimizer(self, trainable, expert):
        groups = [{"params": trainable, "weight_decay": WEIGHT_DECAY, "wd_mult": 1.0,
                   "lr_mult": 1.0, "is_expert_parallel": expert,
                   "is_decoupled_lr": False}] if trainable else []
        one = OneRankGroup()
        buffers = self.chunk.expert_parallel_buffers if expert else self.chunk.buffers
        return self.megatron._get_megatron_optimizer_based_on_param_groups(
            self.config, [self.chunk], groups, per_model_buffers={0: buffers},
            model_parallel_group=one, data_parallel_group=one, data_parallel_group_gloo=None,
            data_parallel_group_idx=0, intra_dist_opt_group=one,
            distributed_optimizer_instance_id=0,
            pg_collection=types.SimpleNamespace(tp=one, dp_cp=one))

    def _chunk(self):
        """The model chunk as the optimizer reads it. With the distributed optimizer and a
        trainable parameter, Megatron's own DistributedDataParallel (its buffers are what the
        distributed optimizers shard); else a stand-in without buffers: DDP holds none for frozen
        parameters, and the wrappers without the distributed optimizer read none."""
        distributed = self.request["wrapper"] == "distributed"
        ddp_config = self.megatron.DistributedDataParallelConfig(
            use_distributed_optimizer=distributed, grad_reduce_in_fp32=True)
        if not distributed or self.request["frozen"]:
            return ModelChunk(ddp_config, [], [], [], [])
        ddp_class, collection_class = self.megatron.training_classes()
        one = OneRankGroup()
        # The layout the trainer computes before wrapping (DDP warns where it must compute it).
        layout = self.megatron.DistributedOptimizer.compute_full_param_layout(
            self.params, None, 1, ddp_config, expert_data_parallel_world_size=1)
        ddp = ddp_class(training.ModelConfigStandIn(), ddp_config,
                        training.ChunkModule(self.params, self.case_index),
                        pg_collection=collection_class(tp=one, pp=one, ep=one, dp=one, dp_cp=one,
                                                       expt_dp=one),
                        full_param_layout=layout)
        # STAND_INS: over one member the param all-gather changes nothing.
        ddp.start_param_sync = ddp._start_bucket_group_param_sync = _gathered
        return ddp

    def require_constructed(self):
        pass

    def step(self, grads):
        with torch.no_grad():
            for param, bits in zip(self.params, grads):
                param.main_grad.view(-1).copy_(from_bits(bits))
        self.dist.step()

    def values(self):
        return [to_bits(p.detach()) for p in self.params]

    def main_values(self):
        """Each parameter's main (fp32) copy in the distributed optimizers that hold it, whole
        (one rank holds every piece); the parameter itself where no optimizer holds it."""
        mains = {}
        for o in self.dist.chained_optimizers:
            if o.is_stub_optimizer or not hasattr(o, "shard_fp32_from_float16_groups"):
                continue
            for models, shards in ((o.model_float16_groups, o.shard_fp32_from_float16_groups),
                                   (o.model_fp32_groups, o.shard_fp32_groups)):
                for model_group, shard_group in zip(models, shards):
                    for model, shard in zip(model_group, shard_group):
                        mains[id(model)] = shard
        return [to_bits(mains.get(id(p), p).detach()) for p in self.params]

    def group_settings(self):
        """Each chained optimizer's inner param groups, every key but the parameters."""
        return [[{k: repr(v) for k, v in g.items() if k != "params"}
                 for g in (o.optimizer.param_groups if o.optimizer is not None else [])]
                for o in self.dist.chained_optimizers]


def _gathered(*unused, **unused_keywords):
    """DDP's param all-gather after a step, over a group of one member: nothing to gather."""


class Failed(Exception):
    """A call of the lifecycle raised: `call` names it."""

    def __init__(self, call, error):
        super().__init__(f"{call}: {type(error).__name__}: {error}")
        self.call = call


def _run(call, function, *args):
    try:
        return function(*args)
    except Exception as e:  # the call's outcome, as the trainer would meet it
        raise Failed(call, e) from e


def _steps(rank, grads, first):
    for k, step_grads in enumerate(grads):
        _run(f"step {first + k + 1}", rank.step, step_grads)


RESUMES = ("optimizer", "weights", "main_params_from_checkpoint")


def _resume(megatron, request, saved):
    """A fresh rank (other initial values) resumed from `saved` as the request's `resume` asks:
    the optimizer state loaded (a stub loads none); the weights only, then
    `reload_model_params()` (--finetune, --no-load-optim); or the weights, then
    `reload_model_params(state_dict)` with the checkpoint's state dict
    (--load-main-params-from-ckpt, with --no-load-optim)."""
    zeros = [to_bits(torch.zeros(from_bits(bits).numel())) for bits in request["initial"]]
    rank = _run("build to resume", WrapperRank, megatron, request, zeros)
    if request["resume"] == "optimizer" and not rank.dist.is_stub_optimizer:
        _run("load", dist_checkpoint.load, rank, saved)
        return rank
    _run("load the weights", dist_checkpoint.load_weights, rank, saved)
    if request["resume"] == "main_params_from_checkpoint":
        state = {"model": dist_checkpoint.model_weights(saved)}
        _run("reload_model_params(state_dict)", rank.dist.reload_model_params, state)
    else:
        _run("reload_model_params", rank.dist.reload_model_params)
    return rank


def _in_fp32(request):
    """The run that saved an fp32 checkpoint of the same model: every parameter fp32, no
    mixed precision (a model trained, or converted, in fp32, then finetuned in 16 bits)."""
    params = [dict(spec, dtype="fp32") for spec in request["params"]]
    return dict(request, wrapper="fp32", params=params)


def _saved_after(megatron, request, k):
    """The checkpoint the resume reads, saved after `k` steps; what the save changed in the
    optimizers' param groups. With main params from the checkpoint, an fp32 run saved it."""
    source = request
    if request["resume"] == "main_params_from_checkpoint":
        source = _in_fp32(request)
    saving = _run("build", WrapperRank, megatron, source, request["initial"])
    _steps(saving, request["grads"][:k], 0)
    saved = dist_checkpoint.Saved()
    before = saving.group_settings()
    _run("save", dist_checkpoint.save, saving, saved, not saving.dist.is_stub_optimizer)
    if saved.error is not None:
        raise Failed("save", saved.error)
    return saved, _changed(before, saving.group_settings()), saving


def lifecycle(megatron, request):
    """Runs the request's lifecycle: uninterrupted; saved after `save_after` steps and resumed
    as `resume` asks; and the reference of the resumed run (uninterrupted when the optimizer
    state is loaded, else a fresh optimizer built from the saved weights; none where the main
    params come from the checkpoint: then `main_after_reload`, each parameter's main copy right
    after the reload, must be the checkpoint's `checkpoint_weights`). Returns the parameters of
    each (fp32 bits per parameter), whether the optimizer is a stub and its class, or the call
    that raised."""
    if request.get("resume") not in RESUMES:
        raise ValueError(f"wrapper_lifecycle: resume must be one of {', '.join(RESUMES)}, not "
                         f"{request.get('resume')!r}")
    grads, k = request["grads"], int(request["save_after"])
    from_checkpoint = request["resume"] == "main_params_from_checkpoint"
    try:
        plain = _run("build", WrapperRank, megatron, request, request["initial"])
        _steps(plain, grads, 0)
        saved, changed, saving = _saved_after(megatron, request, k)
        resumed = _resume(megatron, request, saved)
        main_after_reload = resumed.main_values() if from_checkpoint else None
        _steps(resumed, grads[k:], k)
        reference = _reference(megatron, request, plain, saving, k)
    except Failed as e:
        return {"raised": str(e), "call": e.call}
    return {"optimizers": [type(o).__name__ for o in plain.dist.chained_optimizers],
            "stubs": [bool(o.is_stub_optimizer) for o in plain.dist.chained_optimizers],
            "save_changed": changed, "uninterrupted": plain.values(),
            "resumed": resumed.values(),
            "reference": reference.values() if reference is not None else None,
            "main_after_reload": main_after_reload,
            "checkpoint_weights": saving.values() if from_checkpoint else None}


def _reference(megatron, request, plain, saving, k):
    """What the resumed run must equal; None where the main params come from the checkpoint."""
    if request["resume"] == "main_params_from_checkpoint":
        return None
    if request["resume"] == "optimizer" and not plain.dist.is_stub_optimizer:
        return plain
    reference = WrapperRank(megatron, request, saving.values())
    _steps(reference, request["grads"][k:], k)
    return reference


def _changed(before, after):
    """What a save changed in the optimizers' param groups, in words; None where nothing."""
    for k, (old, new) in enumerate(zip(before, after)):
        for g, (a, b) in enumerate(zip(old, new)):
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    return (f"optimizer {k} group {g} '{key}': {a.get(key, 'absent')} before, "
                            f"{b.get(key, 'absent')} after")
    return None
