"""What this machine lacks, supplied: a CUDA stand-in and the torch.distributed set-up Megatron
expects. Each install_* returns the stand-in lines it installed.

Contract of each stand-in, written from PyTorch's CUDA semantics (c10/cuda, the CUDA caching
host allocator behind pin_memory, Tensor.to/copy_ with non_blocking): what CUDA refuses, what it
computes, and what the stand-in does.

CUDA tensors (AcceleratorTensor: host tensors that report `is_cuda`, a `torch.cuda.*` type()
and device cuda:0; every op on them yields the class again)
- An op that mixes CUDA tensors with host tensors of one dimension or more: CUDA raises (host
  0-dim tensors pass as scalars). Same, for every op, `out=` included; copy_ and `.to` copy
  across. Stricter than CUDA: the few ops that accept host index tensors (indexing a CUDA tensor
  with a host LongTensor, assigning a host tensor to a slice) raise too.
- A device index the machine does not have: CUDA raises "invalid device ordinal". Same: the
  stand-in is one device, cuda:0, and refuses cuda:1 and above in factories, `.cuda()`,
  `.to()` and streams.
- `.numpy()` (and numpy's asarray) of a CUDA tensor: CUDA raises TypeError. Same.
- `.pin_memory()` of a CUDA tensor, and `pin_memory=True` with a CUDA device in a factory:
  CUDA raises (only dense host tensors can be pinned). Same.
- What an op computes: CUDA's kernel. The stand-in runs torch's CPU kernel (torch._fused_adamw_
  included); values can differ where the kernels round differently (reduction order, division by
  a scalar), and a kernel CUDA lacks for a dtype still runs. Memory is host memory: CUDA's
  out-of-memory never happens.
- `.cpu()` / `.to("cpu")` copy out (a blocking copy waits for the current stream); `.cuda()` /
  `.to("cuda")` and factories with a CUDA device copy in. Same.

Pinned host memory
- CUDA's pin_memory() returns a page-locked copy (the tensor itself if it is pinned already),
  is_pinned() is then true, and a non-blocking copy between it and the device is asynchronous:
  the host must wait (an event, a stream or device synchronize) before reading a device-to-host
  result or rewriting a host-to-device source. From pageable memory a non-blocking copy is
  synchronous for the host.
- The stand-in: pin_memory() returns a new host tensor (a copy, every time) and pin_memory=True
  gives ordinary host memory, both marked `pin_requested`; is_pinned() stays false (nothing is
  page-locked without CUDA). Every copy has completed when issued; the waits CUDA would need are
  told to the stream-order observer (stream_order.py checks them).

CUDA streams and events
- On CUDA, work on one stream runs in issue order and streams run concurrently unless ordered by
  wait_stream, wait_event or a synchronize; an event records the work issued before it;
  query() says whether that work has finished; elapsed_time() needs both events created with
  enable_timing=True and recorded.
- The stand-in runs every op when issued, in program order: query() is always true and no wait
  blocks. Each stream and event call is told to the observer, where one is set (the checker
  reports an access CUDA's order leaves unordered). elapsed_time() raises as CUDA does without
  enable_timing; with it, it is refused by name (no device clock). Streams on a device other
  than cuda:0 are refused, as above.
"""

import contextlib
import functools

import torch

from te_stand_in import StandInRefused

_ACCELERATOR = torch.device("cuda", 0)
_TENSOR_TO = torch.Tensor.to  # before install_cuda_stand_in() wraps it
# Property getters whose result is a new tensor object (a view), not one stored on the tensor.
_NEW_OBJECT_GETTERS = {"data", "T", "mT", "H", "mH", "real", "imag"}


def _is_accelerator_device(device):
    if device is None:
        return False
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if device.type != "cuda":
        return False
    _require_device_zero(device)
    return True


def _require_device_zero(device):
    """The stand-in is one device: an ordinal beyond it is refused as CUDA refuses it."""
    if device.index not in (None, 0):
        raise RuntimeError(f"CUDA error: invalid device ordinal ({device}; this machine has "
                           "one device, cuda:0)")


def is_accelerator(tensor):
    """Whether `tensor` stands for (or is) a tensor in accelerator memory."""
    return isinstance(tensor, AcceleratorTensor) or tensor.is_cuda


def _adopt(value, keep=()):
    """Makes every plain tensor in `value` an AcceleratorTensor, in place (no alias, no copy),
    except the objects in `keep`: an op's own inputs, as an in-place op returns them."""
    if type(value) is torch.Tensor and not any(value is k for k in keep):
        value.__class__ = AcceleratorTensor
        _tell("made_accelerator", value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _adopt(v, keep)
    return value


def _tensors_in(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (tuple, list)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def _check_one_device(func, tensors):
    """Raises as CUDA does when an op mixes accelerator and host tensors (host scalars excepted)."""
    if func in (torch.Tensor.copy_, torch.Tensor.to):
        return
    if not any(isinstance(t, AcceleratorTensor) for t in tensors):
        return
    for t in tensors:
        if not isinstance(t, AcceleratorTensor) and t.dim() > 0:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"cuda:0 and cpu! (in {getattr(func, '__name__', func)})"
            )


def _returns_new_object(func, kwargs):
    if "out" in kwargs:
        return False
    if getattr(func, "__name__", "") == "__get__":
        return getattr(getattr(func, "__self__", None), "__name__", "") in _NEW_OBJECT_GETTERS
    return True


def _parse_target(args, kwargs):
    """(device, dtype, non_blocking, memory_format) of a Tensor.to call."""
    if args and isinstance(args[0], torch.Tensor):
        other = args[0]
        device = _ACCELERATOR if is_accelerator(other) else torch.device("cpu")
        return device, other.dtype, kwargs.get("non_blocking", False), None
    return torch._C._nn._parse_to(*args, **{k: v for k, v in kwargs.items() if k != "copy"})


def _to_host_storage(tensor, dtype, non_blocking, memory_format, copy):
    """Tensor.to on the host storage, the device left as it is."""
    options = {"non_blocking": non_blocking, "copy": copy}
    if dtype is not None:
        options["dtype"] = dtype
    if memory_format is not None:
        options["memory_format"] = memory_format
    with torch._C.DisableTorchFunction():
        return _TENSOR_TO(tensor, **options)


class AcceleratorTensor(torch.Tensor):
    """A host tensor that stands for a tensor in accelerator (CUDA) memory."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = list(_tensors_in(args, kwargs))
        _check_one_device(func, tensors)
        with torch._C.DisableTorchFunction():
            out = func(*args, **kwargs)
        if not _returns_new_object(func, kwargs):
            return out
        return _adopt(out, keep=tensors)

    @property
    def is_cuda(self):
        return True

    def __deepcopy__(self, memo):
        # copy.deepcopy of a state dict (Megatron's checkpointing, the tests): a copy in
        # accelerator memory, as CUDA's deepcopy gives.
        if id(self) not in memo:
            with torch.no_grad():
                copy = self.clone()
            memo[id(self)] = copy.requires_grad_(self.requires_grad) if self.is_leaf else copy
        return memo[id(self)]

    @property
    def device(self):
        return _ACCELERATOR

    def type(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None:
            with torch._C.DisableTorchFunction():
                return torch.Tensor.type(self).replace("torch.", "torch.cuda.", 1)
        with torch._C.DisableTorchFunction():
            return _adopt(torch.Tensor.type(self, dtype, non_blocking, **kwargs))

    def cpu(self, memory_format=torch.preserve_format):
        out = _to_host_storage(self, None, False, memory_format, copy=True)
        _tell("host_waits_stream", _current_stream())  # a blocking copy into host memory
        return out

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        _is_accelerator_device("cuda" if device is None else device)
        return self

    def to(self, *args, **kwargs):
        device, dtype, non_blocking, memory_format = _parse_target(args, kwargs)
        _is_accelerator_device(device)
        leaves = device is not None and device.type == "cpu"
        out = _to_host_storage(self, dtype, non_blocking, memory_format,
                               copy=leaves or kwargs.get("copy", False))
        if leaves and not non_blocking:
            _tell("host_waits_stream", _current_stream())  # a blocking copy into host memory
        return out if leaves or out is self else _adopt(out)

    def pin_memory(self, device=None):
        raise RuntimeError(
            f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")

    def numpy(self, *args, **kwargs):
        raise TypeError(
            "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first.")


# ---- host tensors: copies into the stand-in accelerator, pinned memory ----

def _host_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
    _is_accelerator_device("cuda" if device is None else device)
    return _adopt(_to_host_storage(self, None, non_blocking, memory_format, copy=True))


def _wrap_host_to(original):
    @functools.wraps(original)
    def to(self, *args, **kwargs):
        device, dtype, non_blocking, memory_format = _parse_target(args, kwargs)
        if not _is_accelerator_device(device):
            return original(self, *args, **kwargs)
        return _adopt(_to_host_storage(self, dtype, non_blocking, memory_format, copy=True))
    return to


def _host_pin_memory(self, device=None):
    # A new host tensor, as pin_memory() returns; nothing is page-locked without CUDA.
    out = self.clone()
    out.pin_requested = True
    return out


def _wrap_factory(original):
    """A tensor factory that builds accelerator tensors for a CUDA device and records pin_memory."""
    @functools.wraps(original)
    def factory(*args, **kwargs):
        device = kwargs.pop("device", None)
        pinned = kwargs.pop("pin_memory", False)
        on_accelerator = _is_accelerator_device(device)
        if on_accelerator and pinned:
            raise RuntimeError("Only dense CPU tensors can be pinned (pin_memory=True with a "
                               "CUDA device)")
        if device is not None and not on_accelerator:
            kwargs["device"] = device
        out = original(*args, **kwargs)
        if on_accelerator:
            return _adopt(out) if type(out) is torch.Tensor else out.cuda()
        if pinned:
            out.pin_requested = True
        return out
    return factory


_FACTORIES = ("empty", "zeros", "ones", "full", "tensor", "rand", "randn", "randint", "arange",
              "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like",
              "empty_strided", "as_tensor")


# ---- torch.cuda: streams and events in program order ----
#
# The work runs when issued, but what CUDA would guarantee is told to an observer where one is
# set (stream_order.py's checker): each stream and event call, and torch.cuda.synchronize.

_observer = [None]


def set_stream_observer(observer):
    """Makes `observer` (or None) receive the stream and event calls; returns the one before."""
    previous, _observer[0] = _observer[0], observer
    return previous


def _tell(call, *args):
    if _observer[0] is not None:
        getattr(_observer[0], call)(*args)


class Stream:
    """A CUDA stream stand-in: work issued on it has completed already."""

    def __init__(self, device=None, priority=0, **kwargs):
        _is_accelerator_device("cuda" if device is None else device)
        self.device = _ACCELERATOR
        _tell("stream_created", self)

    def wait_stream(self, stream):
        _tell("stream_waits_stream", self, stream)

    def wait_event(self, event):
        _tell("stream_waits_event", self, event)

    def record_event(self, event=None):
        event = event if event is not None else Event()
        event.record(self)
        return event

    def synchronize(self):
        _tell("host_waits_stream", self)

    def query(self):
        return True


class Event:
    """A CUDA event stand-in: recorded work has completed already."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument "
                               "'enable_timing=True'.")
        raise StandInRefused("the CUDA event stand-in has no device clock: elapsed_time")

    def record(self, stream=None):
        _tell("event_recorded", self, stream if stream is not None else _current_stream())

    def wait(self, stream=None):
        _tell("stream_waits_event", stream if stream is not None else _current_stream(), self)

    def synchronize(self):
        _tell("host_waits_event", self)

    def query(self):
        return True


class _CurrentStream:
    stream = Stream()


def _current_stream(device=None):
    return _CurrentStream.stream


@contextlib.contextmanager
def _stream(stream):
    previous = _CurrentStream.stream
    if stream is not None:
        _CurrentStream.stream = stream
    try:
        yield
    finally:
        _CurrentStream.stream = previous


def _synchronize(device=None):
    _tell("host_waits_all")


def install_cuda_stand_in():
    """Installs the host-memory CUDA stand-in; returns what it installed, in words."""
    torch.Tensor.cuda = _host_cuda
    torch.Tensor.to = _wrap_host_to(torch.Tensor.to)
    torch.Tensor.pin_memory = _host_pin_memory
    for name in _FACTORIES:
        setattr(torch, name, _wrap_factory(getattr(torch, name)))
    cuda = torch.cuda
    cuda.Stream, cuda.Event = Stream, Event
    cuda.current_stream = cuda.default_stream = _current_stream
    cuda.stream = _stream
    cuda.synchronize = _synchronize
    cuda.current_device = lambda: 0
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.empty_cache = lambda: None
    cuda.is_current_stream_capturing = lambda: False  # torch.optim's step asks; no graphs here
    return [
        "CUDA tensors: host tensors of a subclass that reports is_cuda, type() 'torch.cuda.*' and "
        "device cuda:0, keeps its class through every op and refuses ops mixed with host tensors; "
        ".cpu()/.to('cpu') copy out, .cuda()/.to('cuda') and factories with device='cuda' copy in; "
        "every op on them runs torch's CPU kernel (torch._fused_adamw_ included)",
        "pinned host memory: pin_memory() and pin_memory=True give ordinary host memory marked "
        "pin_requested; is_pinned() stays false (nothing is page-locked without CUDA, as for "
        "the port on a CPU machine)",
        "CUDA streams and events: program order (every copy has completed when issued)",
        "torch.cuda.current_device/is_available/device_count/synchronize/empty_cache: one device; "
        "is_current_stream_capturing: false (no CUDA graphs)",
    ]


# ---- torch.distributed ----

def install_distributed(world=None):
    """A one-process gloo group over an in-memory store, so that Megatron's checks of
    torch.distributed pass, and the DP groups Megatron is handed are stand-ins (their contract is
    in rank.py); or, given a world (world.py), that world joined: real processes, real Gloo
    groups. Returns what it added. torch.distributed.all_reduce on a group stand-in that
    simulates its other ranks is that group's answer, synchronous only (async_op is refused by
    name); on any other group it is torch's own."""
    distributed = torch.distributed
    added = []
    if world is not None and not distributed.is_initialized():
        world.join()
    elif not distributed.is_initialized():
        distributed.init_process_group("gloo", store=distributed.HashStore(), rank=0,
                                       world_size=1)
    if not getattr(distributed.all_reduce, "simulates_stand_in_groups", False):
        plain_all_reduce = distributed.all_reduce

        def all_reduce(tensor, op=distributed.ReduceOp.SUM, group=None, async_op=False):
            simulated = getattr(group, "all_reduce", None)
            if simulated is not None:  # torch checks its argument before it asks the group
                distributed.distributed_c10d._check_single_tensor(tensor, "tensor")
            if simulated is not None and async_op:
                raise StandInRefused("a group stand-in reduces synchronously only (async_op)")
            if simulated is not None:
                return simulated(tensor, op)
            return plain_all_reduce(tensor, op=op, group=group, async_op=async_op)

        all_reduce.simulates_stand_in_groups = True
        distributed.all_reduce = all_reduce
        added.append("torch.distributed.all_reduce: on a group stand-in that simulates its other "
                     "ranks (the grad-stats group), that group's answer; else gloo's")
    if world is None:
        added.append("torch.distributed: one process (gloo, in-memory store); data-parallel "
                     "ranks are emulated by process-group stand-ins of size dp that answer "
                     "size() and rank() only")
    return added
