"""The optimizers Megatron's factory builds besides the distributed optimizer, driven as the
trainer drives them: what the worker's `wrapper_lifecycle` op serves (sim/rig/wrapper_call.h).

`_get_megatron_optimizer_based_on_param_groups` wraps the inner optimizer in
Float16OptimizerWithFloat16Params (bf16 without the distributed optimizer) or FP32Optimizer
(neither bf16 nor fp16), and, on a rank whose parameters are all frozen (no param groups: a
frozen pipeline stage), builds a stub of the wrapper the options ask for, the
DistributedOptimizer's included. The trainer steps it; saves a distributed checkpoint (the
model's sharded state dict and, unless the optimizer is a stub, the optimizer's); and a fresh
rank resumes from it: the weights loaded, then the optimizer state (`sharded_state_dict(
is_loading=True)`, `load_state_dict`) or, finetuning or with --no-load-optim, no optimizer state
and `reload_model_params()`; then it steps on.

One rank holds whole parameters (a non-distributed optimizer shards nothing), their main_grad an
fp32 tensor of the parameter's shape that the caller fills before each step (DDP's grad buffer
with grad_reduce_in_fp32). No collective runs: without a loss scaler, clipping or zero counting
the step asks no group.
"""

import types

import torch

import dist_checkpoint
from rank import DTYPES, INNER_LR, ModelChunk, from_bits, to_bits

WEIGHT_DECAY = 0.01
STAND_INS = [
    "the non-distributed optimizers (wrapper_lifecycle): one rank with whole parameters, each "
    "with an fp32 main_grad the request fills (DDP's grad buffer with grad_reduce_in_fp32), no "
    "model chunks and no DDP buffers (the factory gives a non-distributed or stub optimizer "
    "none); the distributed checkpoint held in memory as for the distributed optimizer "
    "(dist_checkpoint.py)",
]


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
        self.dist = self._build()

    def _make_param(self, spec, bits):
        values = from_bits(bits).view(spec["shape"]).to(DTYPES[spec["dtype"]])
        param = torch.nn.Parameter(values.cuda(), requires_grad=not self.request["frozen"])
        param.main_grad = torch.zeros(param.shape, dtype=torch.float32, device="cuda")
        return param

    def _config(self):
        wrapper = self.request["wrapper"]
        return self.megatron.OptimizerConfig(
            optimizer="adam", lr=INNER_LR, weight_decay=WEIGHT_DECAY, clip_grad=0.0, fp16=False,
            bf16=wrapper != "fp32", decoupled_weight_decay=True,
            use_distributed_optimizer=wrapper == "distributed")

    def _build(self):
        """The factory's optimizer: a frozen rank gets no param groups, as Megatron's own
        `_get_param_groups` leaves out parameters that do not require grad."""
        trainable = [p for p in self.params if p.requires_grad]
        groups = [{"params": trainable, "weight_decay": WEIGHT_DECAY, "wd_mult": 1.0,
                   "lr_mult": 1.0, "is_expert_parallel": False,
                   "is_decoupled_lr": False}] if trainable else []
        one = types.SimpleNamespace(size=lambda: 1, rank=lambda: 0)
        return self.megatron._get_megatron_optimizer_based_on_param_groups(
            self._config(), [self._chunk()], groups, per_model_buffers={0: []},
            data_parallel_group=one,
            data_parallel_group_gloo=None, data_parallel_group_idx=0, intra_dist_opt_group=one,
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
        _run("save", dist_checkpoint.save, saving, saved,
             not saving.dist.is_stub_optimizer)
        if saved.error is not None:
            raise Failed("save", saved.error)
        resumed = _resume(megatron, request, saved, load_optimizer)
        _steps(resumed, grads[k:], k)
        if load_optimizer and not plain.dist.is_stub_optimizer:
            reference = plain
        else:
            reference = WrapperRank(megatron, request, saving.values())
            _steps(reference, grads[k:], k)
    except Failed as e:
        return {"raised": str(e), "call": e.call}
    return {"optimizer": type(plain.dist).__name__, "stub": bool(plain.dist.is_stub_optimizer),
            "uninterrupted": plain.values(), "resumed": resumed.values(),
            "reference": reference.values()}
