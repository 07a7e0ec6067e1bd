"""Which kernels did the candidate launch? The anti-cheat's evidence.

On the GPU: kernel names and durations from torch.profiler's CUDA activity, plus the Triton
functions run. Under the Triton interpreter there is no GPU profiler, so the JIT functions' run()
is wrapped: a launch counts as the candidate's own when the jitted function was defined in its
file, and the elements its loads and stores touch (and its tl.dot's multiply-accumulates) are its
own work (share.py weighs them against the aten ops it calls). A candidate that launches nothing
of its own (only the library op it replaces, generic aten kernels, or torch.compile's generated
ones) is rejected as a cheat.
"""

from __future__ import annotations

import contextlib
import gc
import re
import sys
from dataclasses import dataclass, field
from typing import Callable

from autokernel.bench.share import MAX_SHARE, WorkMeter, covered_us, cpu_share, gpu_share, paused, share_reason

# Kernels any torch code may launch that are not a candidate's own work: aten's elementwise /
# copy / fill / reduce kernels, memcpy/memset, and what inductor generates for torch.compile.
GENERIC_PATTERNS = ("at::native::", "elementwise_kernel", "vectorized_elementwise", "unrolled_elementwise",
                    "reduce_kernel", "CatArrayBatchedCopy", "Memcpy", "Memset", "memcpy", "memset",
                    "triton_poi_", "triton_red_", "triton_per_", "triton_tem_", "triton__",
                    "spin_kernel")  # torch.cuda._sleep: the judge's markers, and no one's work
MARKER = "spin_kernel"
MARK_CYCLES = 1000  # the judge's marker kernels: a GPU sleep of about half a microsecond


@dataclass
class GpuSession:
    """One profiled call: its kernels (name, start, end in microseconds on the profiler's GPU
    timeline), the span its work lies in (from the start of the judge's lead sleep: work the
    candidate put on another stream runs beside it), the judge's own marker kernels in it, and
    whether the call ran warm behind the lead sleep (its kernels back to back, so idle GPU time in
    the span is unexplained)."""
    intervals: list[tuple[str, float, float]]
    span: tuple[float, float]
    warm: bool
    marks: list[tuple[float, float]] = field(default_factory=list)

    def work_us(self) -> float:
        """The GPU time of the call itself: its span after the judge's lead sleep."""
        return max(0.0, self.span[1] - self.work_start())

    def work_start(self) -> float:
        return max([e for _s, e in self.marks] + [self.span[0]])

    def busy_us(self) -> float:
        """The time in that span the GPU ran the call's kernels (overlapping ones counted once): the
        span less the gaps where it waited, for the host's launches after a synchronisation inside
        the call (which the profiler slows) or for nothing."""
        lo, hi = self.work_start(), self.span[1]
        return covered_us([(max(s, lo), min(e, hi)) for _n, s, e in self.intervals])


@dataclass
class Launches:
    triton_own: list[str] = field(default_factory=list)  # jitted functions defined in the candidate file
    triton_other: list[str] = field(default_factory=list)
    gpu_kernels: list[str] = field(default_factory=list)  # profiler names (GPU only)
    gpu_sessions: list[GpuSession] = field(default_factory=list)  # the profiled calls (GPU only)
    profile_gap: str | None = None  # why a profiled call's record cannot be trusted (markers missing)
    meter: WorkMeter = field(default_factory=WorkMeter)  # interpreter: own work vs the aten ops it called

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for n in self.gpu_kernels + self.triton_own:
            seen.setdefault(n, None)
        return list(seen)


def triton_classes() -> list:
    classes = []
    try:
        from triton.runtime.jit import JITFunction
        classes.append(JITFunction)
    except Exception:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        classes.append(InterpretedFunction)
    except Exception:
        pass
    return classes


class OutOfBoundsAccess(RuntimeError):
    """A Triton kernel under the interpreter touched memory outside every tensor it was given.

    On the GPU that is an illegal memory access (or silent corruption); under the interpreter it
    corrupts the worker's heap, so it is caught before the access happens."""


# Byte ranges of the tensor arguments of the launch in progress (interpreter bounds check), and
# the meter its work counts into (None: not the candidate's own kernel).
_live_ranges: list[list[tuple[int, int]]] = []
_meters: list[WorkMeter | None] = []


def _tensor_ranges(values) -> list[tuple[int, int]]:
    import torch

    out = []
    for v in values:
        if isinstance(v, torch.Tensor) and v.numel():
            st = v.untyped_storage()
            out.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    return out


def _check_access(kind: str, ptrs, mask) -> None:
    if not _live_ranges:
        return
    import numpy as np

    addrs = np.asarray(ptrs.data, dtype=np.uint64)
    if mask is not None:
        addrs = addrs[np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)]
    if addrs.size == 0:
        return
    if _meters and _meters[-1] is not None:
        _meters[-1].own += addrs.size
    size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
    ok = np.zeros(addrs.shape, dtype=bool)
    for lo, hi in _live_ranges[-1]:
        ok |= (addrs >= np.uint64(lo)) & (addrs + np.uint64(size) <= np.uint64(hi))
    if not ok.all():
        bad = int(addrs[~ok][0])
        raise OutOfBoundsAccess(f"illegal memory access: {kind} of {int((~ok).sum())} element(s) outside every "
                                f"tensor argument (first at {bad:#x}), caught by the interpreter's bounds check")


def _guard_interpreter() -> list:
    """Patch the interpreter's memory ops with the bounds check; returns what to restore."""
    try:
        from triton.runtime.interpreter import InterpreterBuilder as B
    except Exception:
        return []
    orig = {n: getattr(B, n) for n in ("create_masked_load", "create_masked_store", "create_atomic_rmw",
                                       "create_atomic_cas", "create_dot")}

    def load(self, ptrs, mask, *a, **k):
        _check_access("load", ptrs, mask)
        return orig["create_masked_load"](self, ptrs, mask, *a, **k)

    def store(self, ptrs, value, mask, *a, **k):
        _check_access("store", ptrs, mask)
        return orig["create_masked_store"](self, ptrs, value, mask, *a, **k)

    def rmw(self, op, ptr, val, mask, *a, **k):
        _check_access("atomic", ptr, mask)
        return orig["create_atomic_rmw"](self, op, ptr, val, mask, *a, **k)

    def cas(self, ptr, cmp, val, *a, **k):
        _check_access("atomic", ptr, None)
        return orig["create_atomic_cas"](self, ptr, cmp, val, *a, **k)

    def dot(self, a, b, *rest, **k):
        if _meters and _meters[-1] is not None:
            _meters[-1].own += float(a.data.size) * (b.data.shape[-1] if b.data.ndim else 1)
        return orig["create_dot"](self, a, b, *rest, **k)

    B.create_masked_load, B.create_masked_store, B.create_atomic_rmw, B.create_atomic_cas = load, store, rmw, cas
    B.create_dot = dot
    return [(B, n, f) for n, f in orig.items()]


@contextlib.contextmanager
def record_triton(module_name: str, launches: Launches, bounds_check: bool = True):
    """Wrap run() of Triton's JIT classes for the duration; every launch is attributed by the
    module its Python function was defined in. Under the interpreter, memory accesses are also
    checked against the launch's tensor arguments."""
    patched = []
    for cls in triton_classes():
        orig = cls.run

        def run(self, *args, __orig=orig, **kwargs):
            fn = getattr(self, "fn", None)
            name = getattr(fn, "__name__", "?")
            own = getattr(fn, "__module__", None) == module_name
            (launches.triton_own if own else launches.triton_other).append(name)
            _live_ranges.append(_tensor_ranges(list(args) + list(kwargs.values())))
            _meters.append(launches.meter if own else None)
            profile = sys.getprofile()  # a judge's profile hook (kb/guards.py) skips the interpreter
            if profile is not None:
                sys.setprofile(None)
            try:
                with paused():  # the interpreter's own torch calls are not the candidate's
                    return __orig(self, *args, **kwargs)
            finally:
                _live_ranges.pop()
                _meters.pop()
                if profile is not None:
                    sys.setprofile(profile)

        patched.append((cls, "run", orig))
        cls.run = run
    import os

    if bounds_check and os.environ.get("TRITON_INTERPRET") == "1":
        patched += _guard_interpreter()
    try:
        yield launches
    finally:
        for owner, attr, orig in patched:
            setattr(owner, attr, orig)


@contextlib.contextmanager
def record_gpu(launches: Launches, lead_us: float | None = None, after: Callable[[], None] | None = None):
    """Profile one call of the candidate (the body of the with-statement) into `launches`; yields
    `ended`, which the body calls as soon as the candidate's call returns.

    The judge's own marker kernels bracket the call on the profiler's GPU timeline: a GPU sleep
    before it on the judge's stream (`lead_us` long on a warm call, so that the call's launches
    queue behind it and run back to back); `ended()` queues a short one on the same stream right
    behind the call's launches, so it starts when the call's work on that stream is done, whatever
    the host does next; and after the call, each behind a synchronize of every stream, two more.
    The span of the call's work is from the start of the lead marker (a side stream of the
    candidate's runs beside it) to the start of the end marker, or to the end of a kernel seen
    later (work on a side stream). A body that does not call `ended` gets the marker queued when it
    is over (a call that raises leaves no session). A marker missing from the record means the
    profiler's collection was off when it ran: the candidate turned it off and left it so
    (launches.profile_gap says so). Turned off and on again within the call, the profiler misses
    the candidate's kernels but not the GPU time they took (share.session_work). Work on a side
    stream the call never waits for, hidden from the profiler, lies past the end marker: timing's
    tail check (work still running after a timed call) rejects it when timed; put there only while
    profiled, the watched floor does (watched_reason).

    `after` (the judge's integrity check) runs once the closing markers have run, before the
    profiler's own code."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from autokernel.bench.timing import cycles_per_us

    cycles = cycles_per_us("cuda")
    gc_was_on = gc.isenabled()
    marked: list[bool] = []
    # No cyclic garbage collection from the lead to the last marker (as timing.py): one in the call
    # leaves the GPU idle past the lead.
    try:
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            torch.cuda.synchronize()
            gc.disable()
            judges = torch.cuda.current_stream()
            sleep, on_stream = torch.cuda._sleep, torch.cuda.stream

            def ended() -> None:
                if not marked:
                    with on_stream(judges):  # the candidate may have left another stream current
                        sleep(MARK_CYCLES)
                    marked.append(True)

            sleep(int((lead_us or 0.0) * cycles) + MARK_CYCLES)
            yield ended
            ended()  # (a no-op where the body called it, as every judge does right after the call)
            for _ in range(2):
                torch.cuda.synchronize()
                sleep(MARK_CYCLES)
            torch.cuda.synchronize()
            if after is not None:
                gc.collect(0)  # finalizers of what the call left (young), seen by the check
                after()
    finally:
        if gc_was_on:
            gc.enable()
    kernels = []
    for evt in prof.events():
        dev = str(getattr(evt, "device_type", ""))
        if dev.endswith("CUDA") and evt.name:
            kernels.append((evt.name, float(evt.time_range.start), float(evt.time_range.end)))
    session = call_session(kernels, lead_us is not None)
    if session is None:
        launches.profile_gap = ("the judge's own marker kernels around its call are missing from the profiler's "
                                "record: its collection was turned off during the call")
        return
    launches.gpu_sessions.append(session)
    for name, start, end in session.intervals:
        if "Memcpy" not in name and "Memset" not in name:
            launches.gpu_kernels.append(name)


def call_session(kernels: list[tuple[str, float, float]], warm: bool) -> GpuSession | None:
    """The profiled call in the profiler's GPU timeline (name, start, end of every kernel), between
    the judge's markers (record_gpu: the lead, the end marker queued behind the call, two closing
    ones), or None when a marker is missing."""
    kernels = sorted(kernels, key=lambda k: k[1])
    # the judge's own work queued before the profile (inputs made, a refill) ran before the lead
    # marker, which waited for it: the record of the call starts at that marker
    opening = next((i for i, k in enumerate(kernels) if MARKER in k[0]), len(kernels))
    kernels = kernels[opening:]
    marks = [k for k in kernels if MARKER in k[0]]
    if len(marks) < 4 or kernels[-1] is not marks[-1]:
        return None
    first, stop, close, last = marks[0], marks[-3], marks[-2], marks[-1]
    # the end marker is the last before the closing ones: a kernel of the candidate's named like a
    # marker that runs after it only moves the end later (more time to account for)
    ours = {id(first), id(stop), id(close), id(last)}
    work = [k for k in kernels if id(k) not in ours]
    # a kernel seen ending later than the end marker's start is still the call's (a side stream), never cut
    end = max([first[2], stop[1]] + [e for _n, s, e in work if s < close[1]])
    return GpuSession(work, (first[1], min(end, close[1])), warm, [(first[1], first[2])])


WATCHED = "it does other work when the profiler watches than when it is timed"


def watched_reason(session: GpuSession, median_us: float, slack: float, slack_us: float,
                   per_kernel_us: float = 0.0, floor_us: float | None = None) -> str | None:
    """A candidate can tell a profiled call from a timed one (the profiler is on, and says so) and
    do its own work only while watched: the profiled call's GPU work must be about what the timed
    calls took, within `slack` x `median_us` + `slack_us` + `per_kernel_us` per kernel (its inputs
    just written, the profiler's own cost per kernel); both judges ask this, each with its slack.
    That work is the time its kernels ran (busy_us), not its span: a forward that synchronises in
    the middle leaves the GPU waiting for the host's next launches, which the profiler slows.
    KernelBench L2 83's start (its forward makes a tensor on the device from a Python number) was
    rejected on the H100 with a span 2.3x its timed median; how much of that span was waiting was
    not recorded then.
    Nor far less: work put on a side stream the call never waits for, only while watched and with
    the profiler's collection off, lies past the judge's end marker (record_gpu), outside the span
    whose unaccounted time counts as library work; the timed calls, waiting for it, took its time.
    The floor is `median_us` / (2 x `slack`) - `floor_us` (inputs warm in L2 make an honest
    profiled call faster than a timed one, whose L2 was flushed), asked only where the caller gives
    `floor_us`: where the timed median is GPU time, not a host's launch path the GPU waited on."""
    work, busy = session.work_us(), session.busy_us()
    if busy > slack * median_us + slack_us + per_kernel_us * len(session.intervals):
        return (f"profiled, its call's kernels ran {busy:.1f} us of GPU time (in a span of {work:.1f} us), timed only "
                f"{median_us:.1f} us: {WATCHED}")
    if floor_us is not None and work < median_us / (2.0 * slack) - floor_us:
        return f"profiled, its call took {work:.1f} us of GPU work, timed {median_us:.1f} us: {WATCHED}"
    return None


def is_foreign(name: str, library_patterns: tuple[str, ...]) -> bool:
    return any(p in name for p in library_patterns) or any(p in name for p in GENERIC_PATTERNS)


def cheat_reason(launches: Launches, library_patterns: tuple[str, ...], on_gpu: bool) -> str | None:
    """None when the candidate launched work of its own; else why it is rejected."""
    if on_gpu:
        if launches.profile_gap:
            return launches.profile_gap
        own = [n for n in launches.gpu_kernels if not is_foreign(n, library_patterns)]
        if own or launches.triton_own:
            return None
        if not launches.gpu_kernels:
            return "launched no GPU kernel at all"
        shown = ", ".join(sorted(set(launches.gpu_kernels))[:5])
        return f"launched only library/generic kernels ({shown}), none of its own"
    if launches.triton_own:
        return None
    if launches.triton_other:
        return f"launched only Triton functions from elsewhere ({', '.join(sorted(set(launches.triton_other))[:5])})"
    return "never launched a triton.jit function of its own file"


def library_share(launches: Launches, library_patterns: tuple[str, ...], on_gpu: bool,
                  exempt=None) -> tuple[float, str]:
    """(the library's share of the candidate's work so far, what did it): share.py. Work `exempt`
    accepts (a kernel or op name) is left out of both sides."""
    if on_gpu:
        return gpu_share(launches.gpu_sessions, lambda n: is_foreign(n, library_patterns), exempt)
    return cpu_share(launches.meter, exempt)


def library_reason(launches: Launches, library_patterns: tuple[str, ...], on_gpu: bool,
                   max_share: float = MAX_SHARE, exempt=None) -> str | None:
    """Why the candidate is a library call by its work's share (share.py), or None."""
    share, what = library_share(launches, library_patterns, on_gpu, exempt)
    return share_reason(share, what, on_gpu, max_share)


def short_name(name: str, limit: int = 120) -> str:
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= limit else name[:limit] + "..."
