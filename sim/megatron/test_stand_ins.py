"""The worker's stand-ins refuse what the components they stand for refuse:

    $(scripts/python-env) sim/megatron/test_stand_ins.py

One or more checks per stand-in: Transformer Engine's FusedAdam and multi-tensor scale
(te_stand_in.py), CUDA tensors, pinned host memory, CUDA streams and events (devices.py), and the
process-group stand-ins (rank.py, wrappers.py). Each contract is written in its stand-in's docstring. Prints "ok NAME" per check and
a count; exits 0 when every check holds.
"""

import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import devices  # noqa: E402
import rank  # noqa: E402
import te_stand_in  # noqa: E402
import wrappers  # noqa: E402
from te_stand_in import FusedAdam, StandInRefused  # noqa: E402

devices.install_cuda_stand_in()
devices.install_distributed()


def raises(call, kind=Exception, words=""):
    """Calls `call`; returns the exception it raised, which must be a `kind` naming `words`."""
    try:
        call()
    except kind as e:
        assert words in str(e), f"{type(e).__name__}: {e} (expected the words {words!r})"
        return e
    raise AssertionError(f"{getattr(call, '__name__', call)} did not raise {kind.__name__}")


def refused_as_the_real_component(call, words=""):
    """Raised as the real component raises: not StandInRefused, which marks the stand-in's own
    gaps."""
    e = raises(call, RuntimeError, words)
    assert not isinstance(e, StandInRefused), f"refused by name, not as TE: {e}"


def param(values, dtype=torch.float32, grad=True):
    p = torch.nn.Parameter(torch.tensor(values, dtype=dtype, device="cuda"))
    if grad:
        p.grad = torch.ones_like(p)
    return p


# ---- Transformer Engine's FusedAdam ----

def check_fused_adam_refuses_host_params():
    host = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    host.grad = torch.ones(2)
    refused_as_the_real_component(FusedAdam([host]).step, "CUDA")


def check_fused_adam_refuses_param_dtypes():
    refused_as_the_real_component(FusedAdam([param([1.0], torch.float64)]).step, "fp32")
    mixed = FusedAdam([param([1.0], torch.float16), param([1.0], torch.bfloat16)])
    refused_as_the_real_component(mixed.step, "mix")


def check_fused_adam_refuses_state_dtypes():
    p = [param([1.0], torch.bfloat16)]
    refused_as_the_real_component(lambda: FusedAdam(p, exp_avg_dtype=torch.float64))
    refused_as_the_real_component(lambda: FusedAdam(p, master_weights=True,
                                                    master_weight_dtype=torch.bfloat16))
    raises(lambda: FusedAdam(p, master_weights=True, master_weight_dtype=torch.float16),
           StandInRefused, "non-fp32 states")
    FusedAdam(p, master_weight_dtype=torch.bfloat16)  # ignored without master weights, as in TE


def check_fused_adam_refuses_options():
    p = [param([1.0])]
    refused_as_the_real_component(lambda: FusedAdam(p, amsgrad=True), "AMSGrad")
    raises(lambda: FusedAdam(p, capturable=True), StandInRefused, "capturable")
    raises(lambda: FusedAdam(p, adam_w_mode=False), StandInRefused, "adam_w_mode")


def check_fused_adam_refuses_sparse_grads():
    p = param([1.0, 0.0], grad=False)
    p.grad = torch.ones(2, device="cuda").to_sparse()
    refused_as_the_real_component(FusedAdam([p]).step, "sparse")


def check_fused_adam_zero_grad_keeps_set_grad_none():
    optimizer = FusedAdam([param([1.0])], set_grad_none=True)
    raises(lambda: optimizer.zero_grad(set_to_none=False), ValueError, "set_grad_none")


def launch(grads, params, exp_avgs, exp_avg_sqs, *masters, remainders=False):
    lists = [grads, params, exp_avgs, exp_avg_sqs, *masters]
    return lambda: te_stand_in.multi_tensor_adam(lists, 1e-3, 0.9, 0.999, 1e-8, 1, True, 0.0,
                                                 remainders=remainders)


def zeros(n, dtype=torch.float32):
    return torch.zeros(n, dtype=dtype, device="cuda")


def check_one_launch_refuses_mismatched_lists():
    g, p, m, v = zeros(2), zeros(2), zeros(2), zeros(2)
    refused_as_the_real_component(launch([g, g], [p], [m], [v]), "holds 1 tensors")
    refused_as_the_real_component(launch([g], [p], [m], [v], [p], [p]), "4 or 5")
    refused_as_the_real_component(launch([g], [p], [zeros(3)], [v]), "elements")
    refused_as_the_real_component(launch([], [], [], []), "at least one")


def check_one_launch_refuses_what_it_may_not_mix():
    g16, p, m, v = zeros(2, torch.bfloat16), zeros(2), zeros(2), zeros(2)
    mixed_grads = launch([zeros(2), g16], [p, zeros(2)], [m, zeros(2)], [v, zeros(2)])
    refused_as_the_real_component(mixed_grads, "grad 1")
    refused_as_the_real_component(launch([zeros(2)], [p], [m], [zeros(2, torch.float16)]),
                                  "moments")
    refused_as_the_real_component(launch([zeros(2)], [p], [m], [v], [zeros(2, torch.float16)]),
                                  "masters")
    remainder = launch([zeros(2)], [p], [m], [v], [zeros(2, torch.int16)], remainders=True)
    refused_as_the_real_component(remainder, "param")
    raises(launch([g16], [g16], [zeros(2, torch.bfloat16)], [zeros(2, torch.bfloat16)]),
           StandInRefused, "bf16 moments")


def check_one_launch_refuses_layout_and_placement():
    strided = zeros(4)[::2]
    refused_as_the_real_component(launch([zeros(2)], [strided], [zeros(2)], [zeros(2)]),
                                  "contiguous")
    refused_as_the_real_component(launch([zeros(2)], [zeros(2)], [torch.zeros(2)], [zeros(2)]),
                                  "cpu")


# ---- CUDA tensors ----

def check_accelerator_tensors_refuse_mixed_devices():
    x = zeros(2)
    raises(lambda: x + torch.ones(2), RuntimeError, "same device")
    raises(lambda: torch.add(x, x, out=torch.empty(2)), RuntimeError, "same device")
    assert (x + torch.tensor(1.0)).is_cuda  # a host 0-dim tensor is a scalar, as on CUDA


def check_accelerator_tensors_refuse_numpy():
    raises(lambda: zeros(2).numpy(), TypeError, "cuda")
    import numpy as np
    raises(lambda: np.asarray(zeros(2)), TypeError, "cuda")


def check_accelerator_tensors_refuse_other_devices():
    raises(lambda: torch.empty(2, device="cuda:1"), RuntimeError, "invalid device ordinal")
    raises(lambda: torch.ones(2).cuda(1), RuntimeError, "invalid device ordinal")
    raises(lambda: torch.ones(2).to("cuda:1"), RuntimeError, "invalid device ordinal")
    raises(lambda: zeros(2).to("cuda:1"), RuntimeError, "invalid device ordinal")
    assert torch.ones(2).to("cuda:0").is_cuda and torch.empty(1, device=0).is_cuda


# ---- pinned host memory ----

def check_pinning_refuses_accelerator_memory():
    raises(lambda: zeros(2).pin_memory(), RuntimeError, "pinned")
    raises(lambda: torch.empty(2, device="cuda", pin_memory=True), RuntimeError, "pinned")


def check_pinning_gives_a_new_unpinned_host_tensor():
    host = torch.ones(2)
    pinned = host.pin_memory()
    assert pinned is not host and pinned.pin_requested and not pinned.is_pinned()
    assert not pinned.is_cuda and torch.empty(2, pin_memory=True).pin_requested


# ---- CUDA streams and events ----

def check_streams_refuse_other_devices():
    raises(lambda: torch.cuda.Stream(device=1), RuntimeError, "invalid device ordinal")
    torch.cuda.Stream(device="cuda:0").wait_stream(torch.cuda.current_stream())


def check_events_time_only_with_timing():
    start, end = torch.cuda.Event(), torch.cuda.Event()
    start.record()
    end.record()
    refused_as_the_real_component(lambda: start.elapsed_time(end), "enable_timing")
    timed = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    raises(lambda: timed[0].elapsed_time(timed[1]), StandInRefused, "elapsed_time")


# ---- process-group stand-ins ----

def check_data_parallel_group_runs_no_collective():
    group = rank.GroupStandIn(2, 1)
    assert (group.size(), group.rank()) == (2, 1)
    raises(lambda: torch.distributed.all_reduce(zeros(2), group=group), ValueError)
    raises(lambda: torch.distributed.broadcast(zeros(2), 0, group=group), ValueError)
    raises(lambda: torch.distributed.all_gather_into_tensor(zeros(4), zeros(2), group=group),
           ValueError)
    raises(lambda: torch.distributed.get_process_group_ranks(group))


def check_grad_stats_group_refuses_what_nccl_refuses():
    group, MAX = rank.GradStatsGroupStandIn(2, 0), torch.distributed.ReduceOp.MAX
    reduce = torch.distributed.all_reduce
    refused_as_the_real_component(lambda: reduce(torch.zeros(1), op=MAX, group=group), "CUDA")
    refused_as_the_real_component(lambda: reduce(zeros(4)[::2], op=MAX, group=group),
                                  "contiguous")
    flag = zeros(1)
    group.found_inf_elsewhere = True
    reduce(flag, op=MAX, group=group)
    assert flag.item() == 1.0


def check_grad_stats_group_refuses_by_name_what_it_cannot_simulate():
    group, reduce = rank.GradStatsGroupStandIn(2, 0), torch.distributed.all_reduce
    SUM, MAX = torch.distributed.ReduceOp.SUM, torch.distributed.ReduceOp.MAX
    raises(lambda: reduce(zeros(1), op=SUM, group=group), StandInRefused, "SUM")
    raises(lambda: reduce(zeros(3), op=MAX, group=group), StandInRefused, "MAX")
    raises(lambda: reduce(zeros(1), op=MAX, group=group, async_op=True), StandInRefused,
           "async_op")


def check_one_rank_group_leaves_the_tensor_and_refuses_what_nccl_refuses():
    group, reduce = wrappers.OneRankGroup(), torch.distributed.all_reduce
    assert (group.size(), group.rank()) == (1, 0)
    t = torch.tensor([2.5, -1.0], device="cuda")
    for op in (torch.distributed.ReduceOp.SUM, torch.distributed.ReduceOp.MAX):
        reduce(t, op=op, group=group)
        assert t.tolist() == [2.5, -1.0], t
    refused_as_the_real_component(lambda: reduce(torch.zeros(1), group=group), "CUDA")
    refused_as_the_real_component(lambda: reduce(zeros(4)[::2], group=group), "contiguous")


def check_multi_tensor_scale_computes_in_fp32_and_flags_non_finite_inputs():
    flag = torch.zeros(1, dtype=torch.int, device="cuda")
    src = torch.tensor([1.5, -2.25, 3.0], dtype=torch.float16, device="cuda")
    dst = torch.zeros(3, dtype=torch.bfloat16, device="cuda")
    te_stand_in.multi_tensor_applier(te_stand_in.multi_tensor_scale, flag, [[src], [dst]], 0.1)
    want = (src.float() * torch.tensor(0.1, dtype=torch.float32)).to(torch.bfloat16)
    assert torch.equal(dst, want) and flag.item() == 0, (dst, want, flag)
    src[1] = float("inf")
    te_stand_in.multi_tensor_scale(te_stand_in.CHUNK_SIZE, flag, [[src], [dst]], 1.0)
    assert flag.item() == 1 and dst[0].item() == 1.5, (dst, flag)


def check_multi_tensor_scale_refuses_what_te_refuses():
    flag, scale = torch.zeros(1, dtype=torch.int, device="cuda"), te_stand_in.multi_tensor_scale
    a = zeros(2)
    refused_as_the_real_component(lambda: scale(1, flag, [[a], []], 1.0), "equal length")
    refused_as_the_real_component(lambda: scale(1, flag, [[a], [torch.zeros(2)]], 1.0), "CUDA")
    refused_as_the_real_component(lambda: scale(1, flag, [[a], [zeros(3)]], 1.0), "elements")
    ints = torch.zeros(2, dtype=torch.int, device="cuda")
    refused_as_the_real_component(lambda: scale(1, flag, [[ints], [a]], 1.0), "takes")


CHECKS = [value for name, value in list(globals().items()) if name.startswith("check_")]


def main():
    failed = 0
    for check in CHECKS:
        name = check.__name__[len("check_"):]
        try:
            check()
            print(f"ok {name}")
        except Exception:
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc()}")
    print(f"{len(CHECKS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
