"""Checks, on the host CUDA stand-in of devices.py, that what CUDA orders covers every access.

The stand-in runs each op when it is issued, so code that forgets a stream wait computes the
right numbers here all the same. Within `checked()`, every ATen op is recorded with the agent
that would run it on a GPU (the current stream when it touches accelerator memory, else the host)
and the byte range of every tensor it reads or writes. Vector clocks follow what CUDA guarantees:
a stream runs its work in issue order and after all the host did before issuing it;
`wait_stream`, `wait_event` and event records order streams; the host is ordered after a stream
by a synchronize (of the stream, an event or the device), by reading a scalar, or by a blocking
copy into host memory. Two accesses to overlapping bytes by different agents, at least one a
write, with neither ordered before the other, are a race: reported with both ops and the lines of
Megatron (or of the caller) that issued them.

Not modelled: the caching allocator's reuse of a block across streams (a new tensor is a fresh
write by the agent that made it), and factories of accelerator tensors, which count as the
host's writes (the stand-in makes them on the host before marking them as accelerator memory).
"""

import contextlib
import functools
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import devices

_HERE = os.path.dirname(os.path.abspath(__file__))
# Frames of torch and of this device layer; the innermost other frame issued the op.
_SKIPPED_FRAMES = (os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), ""),
                   *(os.path.join(_HERE, name)
                     for name in ("devices.py", "stream_order.py", "te_stand_in.py")))
_SCALAR_READS = {"_local_scalar_dense"}


class _Agent:
    """The host or one stream, with its vector clock: for each agent, the last of its ticks
    known to have happened before this agent's next access."""

    def __init__(self, name):
        self.name = name
        self.clock = {self: 0}

    def tick(self):
        self.clock[self] += 1
        return self.clock[self]

    def join(self, clock):
        for agent, tick in clock.items():
            if self.clock.get(agent, 0) < tick:
                self.clock[agent] = tick

    def has_seen(self, agent, tick):
        return agent is self or self.clock.get(agent, 0) >= tick


class _Access:
    def __init__(self, tensor, span, agent, tick, writes, op, site):
        self.span = span
        self.lo, self.hi = span
        self.on_accelerator = devices.is_accelerator(tensor)
        self.agent, self.tick, self.writes, self.op, self.site = agent, tick, writes, op, site

    def describe(self):
        verb = "wrote" if self.writes else "read"
        return f"{self.op} on {self.agent.name} {verb} it (issued at {self.site})"


def _span(tensor):
    """The bytes a tensor's elements occupy, [lo, hi), or None for no elements."""
    if tensor.numel() == 0:
        return None
    extent = 1 + sum((size - 1) * abs(stride)
                     for size, stride in zip(tensor.shape, tensor.stride()))
    lo = tensor.data_ptr()
    return lo, lo + extent * tensor.element_size()


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


@functools.lru_cache(maxsize=None)
def _issuing(filename):
    """Whether a frame of `filename` may have issued an op: outside torch and this layer."""
    return not os.path.abspath(filename).startswith(_SKIPPED_FRAMES)


def _site():
    """The innermost caller outside torch and this device layer: the line that issued the op.
    Runs for every op, so it walks the frames without reading source lines."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if _issuing(code.co_filename):
            return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}"
        frame = frame.f_back
    return "unknown"


def _with_spans(tensors):
    """(tensor, its bytes) for each tensor with elements."""
    return [(t, span) for t in tensors for span in [_span(t)] if span is not None]


def _reads_and_writes(func, args, kwargs):
    """The tensors an op reads and those it writes, from its schema's alias annotations."""
    reads, writes = [], []
    schema = func._schema.arguments
    values = list(args) + [kwargs[a.name] for a in schema[len(args):] if a.name in kwargs]
    for argument, value in zip(schema, values):
        written = argument.alias_info is not None and argument.alias_info.is_write
        (writes if written else reads).extend(_tensors(value))
    return reads, writes


def _is_view(func):
    """Whether every result aliases an input without writing it (view, detach, alias, ...)."""
    returns = func._schema.returns
    arguments = func._schema.arguments
    return bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns) and not any(
        a.alias_info is not None and a.alias_info.is_write for a in arguments)


def _overlap(a, b):
    """Whether the byte ranges a and b, each (lo, hi), share a byte."""
    return a[0] < b[1] and b[0] < a[1]


class StreamOrderChecker(TorchDispatchMode):
    """The ATen-op recorder and the stand-in's stream observer; `races` lists what it found."""

    def __init__(self, max_races=20):
        super().__init__()
        self.host = _Agent("the host")
        self._streams = {}
        self._events = {}
        self._accesses = []
        self._max_races = max_races
        self.races = []
        self._reported = set()
        self._agent(torch.cuda.current_stream(), "the current stream")

    # ---- the stand-in's stream and event calls ----

    def _agent(self, stream, name=None):
        if id(stream) not in self._streams:
            name = name or f"stream {len(self._streams)} (first used at {_site()})"
            self._streams[id(stream)] = (stream, _Agent(name))
        return self._streams[id(stream)][1]

    def _issued_on(self, stream):
        """A stream's agent, ordered after all the host did before issuing work to it."""
        agent = self._agent(stream)
        agent.join(self.host.clock)
        return agent

    def stream_created(self, stream):
        self._agent(stream)

    def stream_waits_stream(self, stream, other):
        self._issued_on(stream).join(self._agent(other).clock)

    def stream_waits_event(self, stream, event):
        self._issued_on(stream).join(self._events.get(id(event), (None, {}))[1])

    def event_recorded(self, event, stream):
        self._events[id(event)] = (event, dict(self._issued_on(stream).clock))

    def host_waits_stream(self, stream):
        self.host.join(self._agent(stream).clock)

    def host_waits_event(self, event):
        self.host.join(self._events.get(id(event), (None, {}))[1])

    def made_accelerator(self, tensor):
        """The stand-in marked an op's new host tensor as accelerator memory, after the op."""
        span = _span(tensor)
        for access in self._accesses:
            if span is not None and (access.lo, access.hi) == span:
                access.on_accelerator = True

    def host_waits_all(self):
        for _, agent in list(self._streams.values()):
            self.host.join(agent.clock)

    # ---- ATen ops ----

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not _is_view(func) or func.__name__.startswith("lift_fresh"):
            self._record(func, args, kwargs, out)
        return out

    def _record(self, func, args, kwargs, out):
        reads, writes = _reads_and_writes(func, args, kwargs)
        if func.__name__.startswith("lift_fresh"):  # torch.tensor(data): a new host tensor
            reads = []
        read, written = _with_spans(reads), _with_spans(writes)
        inputs = [span for _, span in read + written]
        fresh = [(t, span) for t, span in _with_spans(_tensors(out))
                 if not any(_overlap(span, i) for i in inputs)]
        on_accelerator = any(devices.is_accelerator(t) for t in reads + writes)
        agent = (self._issued_on(torch.cuda.current_stream()) if on_accelerator else self.host)
        tick = agent.tick()
        op, site = func.__name__, _site()
        for tensor, span in fresh:  # new memory: what was there before belongs to a freed tensor
            self._accesses = [a for a in self._accesses if not _overlap(a.span, span)]
            self._accesses.append(_Access(tensor, span, agent, tick, True, op, site))
        for pairs, writing in ((read, False), (written, True)):
            for tensor, span in pairs:
                self._access(_Access(tensor, span, agent, tick, writing, op, site))
        if on_accelerator and self._host_waits(func, args, reads + writes):
            self.host.join(agent.clock)

    @staticmethod
    def _host_waits(func, args, tensors):
        """Whether the host blocks until the op completes: a scalar read, or a blocking copy
        to or from host memory (PyTorch synchronizes the stream after it)."""
        if func.__name__.split(".")[0] in _SCALAR_READS:
            return True
        blocking = not (len(args) > 2 and args[2] is True)
        return (func.__name__.startswith("copy_") and blocking
                and any(not devices.is_accelerator(t) for t in tensors))

    def _access(self, access):
        # Bytes once accelerator memory and now host memory, or the other way round, were freed
        # and given out again by an allocation no op recorded (numpy, say).
        self._accesses = [a for a in self._accesses if not _overlap(a.span, access.span)
                          or a.on_accelerator == access.on_accelerator]
        for earlier in self._accesses:
            if (_overlap(earlier.span, access.span) and (earlier.writes or access.writes)
                    and not access.agent.has_seen(earlier.agent, earlier.tick)):
                self._report(earlier, access)
        if access.writes:  # what it covers is now ordered before it, or reported
            self._accesses = [a for a in self._accesses
                              if not (access.lo <= a.lo and a.hi <= access.hi)]
        self._accesses.append(access)

    def _report(self, earlier, later):
        """Reports a race once for each earlier access and later agent: the first op of that
        agent to touch the bytes."""
        if (earlier, later.agent) in self._reported:
            return
        self._reported.add((earlier, later.agent))
        if len(self.races) < self._max_races:
            self.races.append(f"{earlier.describe()}; then {later.describe()}, with nothing "
                              f"ordering {later.agent.name} after {earlier.agent.name}")

    def report(self):
        return "\n".join(self.races) if self.races else "no race"


@contextlib.contextmanager
def recording(checker):
    """Records every op and stream call within into `checker`; nothing when it is None."""
    if checker is None:
        yield
        return
    previous = devices.set_stream_observer(checker)
    try:
        with checker:
            yield
    finally:
        devices.set_stream_observer(previous)


@contextlib.contextmanager
def checked():
    """Records every op and stream call within; yields the checker, whose `races` it filled."""
    checker = StreamOrderChecker()
    with recording(checker):
        yield checker
