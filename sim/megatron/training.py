"""Training mode: gradients reach main_grad as in a training loop (docs/megatron-worker.md).

A rank built with `"training": true` wraps each of its model chunks in Megatron-Core's own
DistributedDataParallel: a small module holding the chunk's parameters of this rank's instance
(the rank's own Parameter objects, with their attributes), wrapped by the tree's DDP class, whose
__init__ makes the grad buffers and registers its grad-accumulator hooks. The DistributedOptimizer
is built on those DDP objects. `backward` runs a forward pass and autograd's backward through
them, so each gradient arrives in main_grad through DDP's own hook, or does not arrive at all.
"""

import contextlib

import torch

from rank import GroupStandIn, from_bits, to_bits

STAND_INS = [
    "training mode, DistributedDataParallel's config: a stand-in holding the TransformerConfig "
    "fields DDP reads, at TransformerConfig's defaults (calculate_per_token_loss False, "
    "cuda_graph_impl 'none', context_parallel_size 1); TransformerConfig's module imports "
    "inference, quantization, fusion, CUDA-graph and pipeline-layout modules outside the "
    "optimizer path and validates a whole transformer. Its process groups, in Megatron's "
    "ProcessGroupCollection: data-parallel and expert data-parallel of the case's sizes (the "
    "rank's stand-ins in one process, the world's Gloo groups on real ranks); tensor, pipeline "
    "and expert model parallel of size 1, stand-ins",
    "training mode on the host device layer: Tensor.backward of an accelerator stand-in tensor "
    "runs under torch's DisableTorchFunction, so autograd's grads are plain host tensors and "
    "DDP's hook adds them into main_grad with torch's CPU kernel, without the stand-in's "
    "mixed-device check",
]

# Only where the DP ranks are emulated in one process; real ranks (world.py) run both.
ONE_PROCESS_STAND_INS = [
    "training mode, grad reduction: backward runs inside every chunk DDP's no_sync(), so no "
    "reduce-scatter or all-reduce is dispatched; the gradient this rank's backward delivers "
    "into main_grad is taken as the DP-reduced one",
    "training mode, param all-gather: DDP's start_param_sync and "
    "_start_bucket_group_param_sync, which the optimizer calls after a step, are stubbed on each "
    "DDP instance (no collective runs on the stand-in group; only this rank's pieces are "
    "observed)",
]


class ModelConfigStandIn:
    """What DistributedDataParallel and MegatronModule read of a TransformerConfig, at its
    defaults. Any other field is an AttributeError: an unexpected read fails loudly."""

    calculate_per_token_loss = False
    cuda_graph_impl = "none"
    context_parallel_size = 1


class ChunkModule(torch.nn.Module):
    """One model chunk of a rank: its parameters, in case order, named `p<case index>`.
    forward(constants) is the sum over the parameters with a constant G of (param * G).sum(),
    whose gradient with respect to each such param is G exactly."""

    def __init__(self, params, case_indices):
        super().__init__()
        for param, index in zip(params, case_indices):
            self.register_parameter(f"p{index}", param)

    def forward(self, constants):
        terms = [(p * constants[id(p)]).sum() for p in self.parameters() if id(p) in constants]
        return sum(terms) if terms else None


def _skip_param_sync(*unused, **unused_keywords):
    """The param all-gather DDP would start after a step: not run (ONE_PROCESS_STAND_INS)."""


def wrap_chunk(rank, members, disable_bucketing, full_param_layout):
    """Megatron's DistributedDataParallel over the rank's parameters `members` (local indices)
    of one model chunk."""
    ddp_class, collection_class = rank.megatron.training_classes()
    module = ChunkModule([rank.params[k] for k in members],
                         [rank.case_index[k] for k in members])
    ddp = ddp_class(ModelConfigStandIn(), rank.ddp_config, module,
                    disable_bucketing=disable_bucketing,
                    pg_collection=_ddp_groups(rank, collection_class),
                    full_param_layout=full_param_layout)
    if rank.world is None:
        ddp.start_param_sync = _skip_param_sync
        ddp._start_bucket_group_param_sync = _skip_param_sync
    return ddp


def _ddp_groups(rank, collection_class):
    """DDP's process groups: the data-parallel group of the rank's buffers (the instance's own
    group for dense parameters, the dense one beside the expert group for experts)."""
    one = GroupStandIn(1, 0)
    if rank.world is not None:
        dense, expert = rank.world.dense(), rank.world.expert(rank.case["expert_dp"])
    elif rank.expert:
        dense, expert = rank.dense_group, rank.group
    else:
        expert_dp = rank.case["expert_dp"]
        dense, expert = rank.group, GroupStandIn(expert_dp, rank.rank % expert_dp)
    return collection_class(tp=one, pp=one, ep=one, dp=dense, dp_cp=dense, expt_dp=expert)


def _constant(param, bits, case_index):
    """The gradient G of one parameter: the request's values in the parameter's dtype and shape,
    on its device; a value the dtype cannot hold is refused."""
    values = from_bits(bits)
    if values.numel() != param.numel():
        raise ValueError(f"backward: {values.numel()} grad values for case parameter "
                         f"{case_index} of {param.numel()} elements")
    rounded = values.to(param.dtype)
    same = (rounded.to(torch.float32) == values) | (rounded.isnan() & values.isnan())
    if not bool(same.all()):
        raise ValueError(f"backward: a grad value of case parameter {case_index} is not "
                         f"representable in {param.dtype}")
    return rounded.view(param.shape).cuda()


def backward(rank, grads):
    """The `backward` op: a forward pass of every chunk and backward of the total loss, inside
    every chunk DDP's no_sync(); on a real rank (world.py) outside it, then each chunk DDP's
    finish_grad_sync(), which reduce-scatters the grads over the real group. The reply's
    `params` in rank.params order."""
    if not rank.training:
        raise ValueError('backward: the rank was built without "training": true; only training '
                         "mode runs a backward pass")
    if len(grads) != len(rank.case["params"]):
        raise ValueError(f"backward: {len(grads)} grad lists for "
                         f"{len(rank.case['params'])} case parameters")
    constants = {id(p): _constant(p, grads[i], i)
                 for p, i in zip(rank.params, rank.case_index) if p.requires_grad}
    if constants:
        with contextlib.ExitStack() as stack:
            if rank.world is None:
                for ddp in rank.model_chunks:
                    stack.enter_context(ddp.no_sync())
            losses = [loss for loss in (ddp(constants) for ddp in rank.model_chunks)
                      if loss is not None]
            sum(losses).backward()
    if rank.world is not None:  # what finalize_model_grads does for data parallelism
        for ddp in rank.model_chunks:
            ddp.finish_grad_sync()
    return {"params": [_param_report(p, i) for p, i in zip(rank.params, rank.case_index)]}


def _param_report(param, case_index):
    main_grad = getattr(param, "main_grad", None)
    return {"param": case_index, "requires_grad": param.requires_grad, "is_leaf": param.is_leaf,
            "grad_is_none": param.grad is None,
            "main_grad": to_bits(main_grad) if main_grad is not None else []}


def zero_grad_buffers(rank):
    """What Megatron's train_step does first: each chunk DDP's zero_grad_buffer()."""
    for ddp in rank.model_chunks:
        ddp.zero_grad_buffer()
