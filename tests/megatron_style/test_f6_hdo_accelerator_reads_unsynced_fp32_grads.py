"""With overlap on, the hybrid optimizer's accelerator step must read fp32 grads already cast.

`HybridDeviceOptimizer.step` makes its D2H stream wait for the current stream and runs
`_set_sub_optimizer_grads` on it (with `overlap_cpu_optimizer_d2h_h2d` a stream of its own). For
each 16-bit parameter that stays on the accelerator and has an fp32 copy, that is
`fp32_param.grad = grad.to(torch.float32)`: a cast kernel on the D2H stream, writing a tensor that
the caching allocator gives out on that stream. The accelerator sub-optimizer's `step()` then runs
on the current stream, which does not wait for the D2H stream, so its kernels may read the fp32
grads before the cast has written them.

On a GPU, the test makes the D2H stream sleep (`torch.cuda._sleep`) before
`_set_sub_optimizer_grads` enqueues the cast, and leaves NaNs in the block of memory that the
cast's output is given: a step that reads the grads before the cast reads NaNs. Where torch.cuda
is a host stand-in that runs streams in program order, the step runs under the stand-in's stream
order checker instead (the fixture `stream_order_checked` of this folder's conftest), which
reports every access that CUDA's stream order leaves unordered.
"""

import pytest
import torch
from torch.optim import AdamW

from megatron.core.optimizer.cpu_offloading import HybridDeviceOptimizer

try:
    from transformer_engine.pytorch.optimizers import FusedAdam

    HAVE_TE = True
except ImportError:
    HAVE_TE = False

LR = 1e-3
NUMEL = 4096
# Some 70-100 ms of GPU clock cycles: far longer than the accelerator step takes to run.
SLEEP_CYCLES = 1 << 27


def _cuda_runs_streams():
    """Whether torch.cuda drives a CUDA device: PyTorch built with CUDA, a device present, and
    torch.cuda.Stream PyTorch's own class (not that of a host stand-in of torch.cuda)."""
    return (
        torch.backends.cuda.is_built()
        and torch.cuda.is_available()
        and torch.cuda.Stream.__module__.startswith("torch.")
    )


needs_cuda_streams = pytest.mark.skipif(
    not _cuda_runs_streams(),
    reason="needs a CUDA device: the race is between two CUDA streams",
)


def _gpu_optimizer_cls(name):
    if name == "te_fused_adam":
        if not HAVE_TE:
            pytest.skip("Transformer Engine's FusedAdam is not available")
        return FusedAdam
    return AdamW


def _initial():
    # Distinct values, exact in bf16.
    return (torch.arange(NUMEL, dtype=torch.float32) % 7 - 3) / 8


def _gradient():
    # Distinct values, exact in bf16, none zero.
    return (torch.arange(NUMEL, dtype=torch.float32) % 64 - 31.5) / 16


def _delay_d2h_stream(hdo):
    """Makes the hybrid optimizer's D2H stream sleep before `_set_sub_optimizer_grads` enqueues
    its work there (step() calls it inside `torch.cuda.stream(hdo._d2h_stream)`)."""
    set_sub_optimizer_grads = hdo._set_sub_optimizer_grads

    def sleep_then_set_sub_optimizer_grads():
        torch.cuda._sleep(SLEEP_CYCLES)
        set_sub_optimizer_grads()

    hdo._set_sub_optimizer_grads = sleep_then_set_sub_optimizer_grads


def _leave_nans_for_the_cast(hdo):
    """With the allocator's cache emptied, allocates a block of NaNs on the D2H stream and frees
    it: the fp32 grad allocated next on that stream, the cast's output, is given that block."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    with torch.cuda.stream(hdo._d2h_stream):
        torch.full((NUMEL,), float("nan"), dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()


def _reference_step(gpu_optimizer_cls, grad):
    """The fp32 copy of the bf16 parameter stepped directly by the same optimizer class."""
    reference = torch.nn.Parameter(_initial().cuda())
    reference.grad = grad.cuda().bfloat16().float()
    gpu_optimizer_cls([reference], lr=LR, weight_decay=0.0).step()
    return reference.detach()


def _overlapping_hdo(params, gpu_optimizer_cls, offload_fraction=0.0):
    # --overlap-cpu-optimizer-d2h-h2d: bf16 parameters whose fp32 copies are stepped on the
    # accelerator, except for the offloaded fraction.
    return HybridDeviceOptimizer(
        params,
        offload_fraction=offload_fraction,
        cpu_optimizer_cls=AdamW,
        gpu_optimizer_cls=gpu_optimizer_cls,
        param_update_in_fp32=True,
        overlap_cpu_optimizer_d2h_h2d=True,
        lr=LR,
        weight_decay=0.0,
    )


@needs_cuda_streams
@pytest.mark.parametrize("gpu_optimizer", ["te_fused_adam", "torch_adamw"])
def test_accelerator_step_reads_the_cast_fp32_grads(gpu_optimizer):
    gpu_optimizer_cls = _gpu_optimizer_cls(gpu_optimizer)
    param = torch.nn.Parameter(_initial().cuda().bfloat16())
    hdo = _overlapping_hdo([param], gpu_optimizer_cls)
    _delay_d2h_stream(hdo)
    _leave_nans_for_the_cast(hdo)
    grad = _gradient()
    # As DistributedOptimizer hands the gradient to a precision-aware inner optimizer.
    param.decoupled_grad = grad.cuda().bfloat16()
    hdo.step()
    torch.cuda.synchronize()

    want = _reference_step(gpu_optimizer_cls, grad)
    master = hdo.param_to_fp32_param[param].detach()
    assert torch.equal(master, want), (
        f"fp32 copy {master[:4].cpu().tolist()}... after the step, "
        f"{want[:4].cpu().tolist()}... stepping the same gradient directly"
    )
    assert torch.equal(param.detach(), want.bfloat16()), "bf16 parameter"


@pytest.mark.parametrize("offload_fraction", [0.0, 0.5])
@pytest.mark.parametrize("gpu_optimizer", ["te_fused_adam", "torch_adamw"])
def test_accelerator_step_is_ordered_after_the_cast(stream_order_checked, gpu_optimizer,
                                                    offload_fraction):
    """Host stand-in: every access of a step, the offloaded half's copies included, is ordered
    by the streams' waits and events as CUDA would order it."""
    gpu_optimizer_cls = _gpu_optimizer_cls(gpu_optimizer)
    params = [torch.nn.Parameter(_initial().cuda().bfloat16()) for _ in range(2)]
    hdo = _overlapping_hdo(params, gpu_optimizer_cls, offload_fraction)
    assert bool(hdo.cpu_optimizers) == (offload_fraction > 0), "the half offloaded, or none"
    for param in params:
        param.decoupled_grad = _gradient().cuda().bfloat16()
    with stream_order_checked() as checker:
        hdo.step()
    assert not checker.races, checker.report()
