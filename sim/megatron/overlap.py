"""The param all-gather overlapped with the forward pass (DDP's overlap_param_gather), driven as
the trainer drives it: what the worker's `overlap_training` op serves.

One process and a DP group of one member: the one-process gloo world's own group, so every
collective DDP and the distributed optimizer dispatch (the grads' reduce-scatter, the params'
all-gather, asynchronous ones included) is torch's own gloo over one member, not a stand-in. Each
parameter sits in a module of its own, registered in the request's parameter order; the model's
forward calls those modules in the request's `order`, which may differ from it, as a model whose
forward visits its layers in another order than it registers them does. DDP's buckets, and the
chain of bucket groups whose param all-gather each forward pre-hook dispatches next, follow the
registration order. Megatron's DistributedDataParallel (overlap_grad_reduce, a bucket per
parameter where bucket_size is 1) and its DistributedOptimizer, built by the factory, train for
the request's steps as train_step does: zero the grad buffers and the optimizer's grads, forward,
backward (autograd's grad of (param * G).sum() is G in the parameter's dtype), finish the grad
sync, step. The same steps run with and without overlap_param_gather.
"""

import torch

import training
from rank import DTYPES, INNER_LR, from_bits, to_bits


class Layer(torch.nn.Module):
    """One parameter; forward(G) is (weight * G).sum()."""

    def __init__(self, weight):
        super().__init__()
        self.weight = weight

    def forward(self, constant):
        return (self.weight * constant).sum()


class Model(torch.nn.Module):
    """The layers, registered in parameter order, called in `order`."""

    def __init__(self, params, order):
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer(p) for p in params)
        self.order = list(order)

    def forward(self, constants):
        return sum(self.layers[k](constants[k]) for k in self.order)


def _check(request):
    n = len(request["params"])
    if sorted(request["order"]) != list(range(n)):
        raise ValueError(f"overlap_training: order must be a permutation of 0..{n - 1}, not "
                         f"{request['order']!r}")
    if any(len(step) != n for step in request["grads"]):
        raise ValueError(f"overlap_training: every step needs {n} grad lists")


def _params(request):
    out = []
    for spec, bits in zip(request["params"], request["initial"]):
        values = from_bits(bits).view(spec["shape"]).to(DTYPES[spec["dtype"]])
        out.append(torch.nn.Parameter(values.cuda()))
    return out


def _build(megatron, request, overlap):
    params = _params(request)
    world = torch.distributed.group.WORLD
    ddp_class, collection_class = megatron.training_classes()
    ddp_config = megatron.DistributedDataParallelConfig(
        use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=overlap,
        bucket_size=request["bucket_size"], grad_reduce_in_fp32=True)
    layout = megatron.DistributedOptimizer.compute_full_param_layout(
        params, request["bucket_size"], 1, ddp_config, expert_data_parallel_world_size=1)
    collection = collection_class(tp=world, pp=world, ep=world, dp=world, dp_cp=world,
                                  expt_dp=world)
    ddp = ddp_class(training.ModelConfigStandIn(), ddp_config, Model(params, request["order"]),
                    pg_collection=collection, full_param_layout=layout)
    config = megatron.OptimizerConfig(optimizer="adam", lr=INNER_LR, clip_grad=0.0, bf16=True,
                                      decoupled_weight_decay=True, use_distributed_optimizer=True)
    groups = [{"params": params, "weight_decay": 0.01, "wd_mult": 1.0, "lr_mult": 1.0,
               "is_expert_parallel": False, "is_decoupled_lr": False}]
    optimizer = megatron._get_megatron_optimizer_based_on_param_groups(
        config, [ddp], groups, per_model_buffers={0: ddp.buffers}, model_parallel_group=world,
        data_parallel_group=world, data_parallel_group_gloo=None, data_parallel_group_idx=0,
        intra_dist_opt_group=world, distributed_optimizer_instance_id=0,
        pg_collection=collection)
    return params, ddp, optimizer


def _train(megatron, request, overlap):
    """The parameters (fp32 bits) after each step, or the call that raised and its error."""
    params, ddp, optimizer = _build(megatron, request, overlap)
    after = []
    for k, step in enumerate(request["grads"]):
        constants = [from_bits(bits).view(p.shape).to(p.dtype).cuda()
                     for bits, p in zip(step, params)]
        try:
            ddp.zero_grad_buffer()
            optimizer.zero_grad()
            ddp(constants).backward()
            ddp.finish_grad_sync()
            optimizer.step()
        except Exception as e:  # the step's outcome, as the trainer would meet it
            return after, f"step {k + 1}: {type(e).__name__}: {e}".rstrip(": ")
        after.append([to_bits(p.detach()) for p in params])
    return after, None


def overlap_training(megatron, request):
    """The op: the steps with overlap_param_gather and without, each run's parameters after every
    step and what raised."""
    _check(request)
    overlapped, overlapped_error = _train(megatron, request, True)
    synchronous, synchronous_error = _train(megatron, request, False)
    return {"overlapped": overlapped, "overlapped_raised": overlapped_error,
            "synchronous": synchronous, "synchronous_raised": synchronous_error}
