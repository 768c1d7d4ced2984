"""The optimizers Megatron's factory builds besides the distributed optimizer, driven as the
trainer drives them: what the worker's `wrapper_lifecycle` op serves (sim/rig/wrapper_call.h).

`get_megatron_optimizer` builds, through `_get_megatron_optimizer_based_on_param_groups`, one
optimizer for the dense parameters (a stub where none is trainable: a frozen pipeline stage) and,
where expert parameters are trainable, one for them, and chains them (ChainedOptimizer, always,
even over one). Each wraps the inner optimizer in Float16OptimizerWithFloat16Params (bf16, or fp16
with the dynamic loss scaler the factory gives it, without the distributed optimizer) or
FP32Optimizer (neither bf16 nor fp16); a stub is of the wrapper the
options ask for, the DistributedOptimizer's included. The trainer steps the chain; saves a
distributed checkpoint (the model's sharded state dict and, unless the chain is a stub, the
chain's); and a fresh rank resumes from it: the weights loaded, then the optimizer state
(`sharded_state_dict(is_loading=True)`, `load_state_dict`) or, finetuning or with
--no-load-optim, no optimizer state and `reload_model_params()`; then it steps on.

One rank holds whole parameters (a non-distributed optimizer shards nothing), their main_grad an
fp32 tensor of the parameter's shape that the caller fills before each step (DDP's grad buffer
with grad_reduce_in_fp32). The model-parallel groups (the grad statistics' groups) have one
member (OneRankGroup). Without clipping the only collectives are the chain's grad-norm
all-reduce and, with fp16, the loss scaler's found-inf all-reduce, which over one member leave
the tensor as it is.
"""

import types

import torch

import dist_checkpoint
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
        return self.megatron._get_megatron_optimizer_based_on_param_groups(
            self.config, [self.chunk], groups, per_model_buffers={0: []},
            model_parallel_group=one, data_parallel_group=one, data_parallel_group_gloo=None,
            data_parallel_group_idx=0, intra_dist_opt_group=one,
            distributed_optimizer_instance_id=0,
            pg_collection=types.SimpleNamespace(tp=one, dp_cp=one))

    def _chunk(self):
        """The model chunk as the optimizer reads it: DDP holds no buffer for frozen parameters,
        and the wrappers without the distributed optimizer read none."""
        ddp_config = self.megatron.DistributedDataParallelConfig(
            use_distributed_optimizer=self.request["wrapper"] == "distributed")
        return ModelChunk(ddp_config, [], [], [], [])

    def require_constructed(self):
        pass

    def step(self, grads):
        with torch.no_grad():
            for param, bits in zip(self.params, grads):
                param.main_grad.view(-1).copy_(from_bits(bits))
        self.dist.step()

    def values(self):
        return [to_bits(p.detach()) for p in self.params]

    def group_settings(self):
        """Each chained optimizer's inner param groups, every key but the parameters."""
        return [[{k: repr(v) for k, v in g.items() if k != "params"}
                 for g in (o.optimizer.param_groups if o.optimizer is not None else [])]
                for o in self.dist.chained_optimizers]


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


def _resume(megatron, request, saved, load_optimizer):
    """A fresh rank (other initial values) resumed from `saved`."""
    zeros = [to_bits(torch.zeros(from_bits(bits).numel())) for bits in request["initial"]]
    rank = _run("build to resume", WrapperRank, megatron, request, zeros)
    stub = rank.dist.is_stub_optimizer
    if load_optimizer and not stub:
        _run("load", dist_checkpoint.load, rank, saved)
    else:
        _run("load the weights", dist_checkpoint.load_weights, rank, saved)
        _run("reload_model_params", rank.dist.reload_model_params)
    return rank


def lifecycle(megatron, request):
    """Runs the request's lifecycle three times: uninterrupted; saved after `save_after` steps
    and resumed; and the reference of the resumed run (uninterrupted when the optimizer state is
    loaded, else a fresh optimizer built from the saved weights). Returns the parameters of each
    (fp32 bits per parameter), whether the optimizer is a stub and its class, or the call that
    raised."""
    grads, k = request["grads"], int(request["save_after"])
    load_optimizer = bool(request["load_optimizer"])
    try:
        plain = _run("build", WrapperRank, megatron, request, request["initial"])
        _steps(plain, grads, 0)
        saving = WrapperRank(megatron, request, request["initial"])
        _steps(saving, grads[:k], 0)
        saved = dist_checkpoint.Saved()
        before = saving.group_settings()
        _run("save", dist_checkpoint.save, saving, saved,
             not saving.dist.is_stub_optimizer)
        if saved.error is not None:
            raise Failed("save", saved.error)
        changed = _changed(before, saving.group_settings())
        resumed = _resume(megatron, request, saved, load_optimizer)
        _steps(resumed, grads[k:], k)
        if load_optimizer and not plain.dist.is_stub_optimizer:
            reference = plain
        else:
            reference = WrapperRank(megatron, request, saving.values())
            _steps(reference, grads[k:], k)
    except Failed as e:
        return {"raised": str(e), "call": e.call}
    return {"optimizers": [type(o).__name__ for o in plain.dist.chained_optimizers],
            "stubs": [bool(o.is_stub_optimizer) for o in plain.dist.chained_optimizers],
            "save_changed": changed, "uninterrupted": plain.values(),
            "resumed": resumed.values(), "reference": reference.values()}


def _changed(before, after):
    """What a save changed in the optimizers' param groups, in words; None where nothing."""
    for k, (old, new) in enumerate(zip(before, after)):
        for g, (a, b) in enumerate(zip(old, new)):
            for key in sorted(set(a) | set(b)):
                if a.get(key) != b.get(key):
                    return (f"optimizer {k} group {g} '{key}': {a.get(key, 'absent')} before, "
                            f"{b.get(key, 'absent')} after")
    return None
