"""Where a model spends its time, by kernel type.

Method. Composite ops that are not one aten op get a profiler range "ak::<type>::<label>" for the
duration of profiling: module forward hooks (…RMSNorm, nn.LayerNorm, SwiGLU MLP blocks, softmax and
loss modules) and patched functions (transformers' apply_rotary_pos_emb and every attention function
in its registry, plus each modeling module's eager attention). torch.profiler then records the
measured forward passes. Each GPU kernel belongs to exactly one CPU event, the one that launched
it (the profiler links kernels to the innermost op or range active at launch); that event is
classified by walking up its parents: the innermost ak:: range wins; with none, the outermost aten
op of a known type (aten::linear over its inner addmm, aten::cross_entropy_loss over its
log_softmax); else "other". Summing each event's own kernels counts every kernel once.

On the CPU there are no kernels: each event's self CPU time is attributed the same way, and the
result says so (time_basis "cpu self time").

Entries (the JSON stored in the profiles table, read by extract and the loop), one per kernel type:
  {"kernel_type", "label", "gpu_ms" (per forward), "share", "calls" (per forward),
   "shapes": [shape dicts in the spec's keys], "weights": [calls per forward of each shape],
   "dtype", "amdahl": 1/(1-share), "gemm_ms": GEMM time inside the entry}
plus a last entry of type "other". LlamaMLP's three GEMMs count as fused_mlp, not matmul; gemm_ms
lets a reader see the matmul share including them (ProfileResult.matmul_share_incl_mlp).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.autograd.profiler import record_function

from autokernel.kernels import registry
from autokernel.models import ModelBundle

RANGE_PREFIX = "ak::"
MAX_SHAPES = 16


def op_types() -> dict[str, str]:
    """aten ops that are a kernel type on their own (outside any composite range) -> the type,
    from every registered type's hooks."""
    return {op: t for t in registry.kernel_types() for op in registry.hooks(t).aten_ops}


@dataclass
class ProfileResult:
    model: str
    entries: list[dict[str, Any]]
    total_gpu_ms: float  # attributed time per forward (GPU kernels; CPU self time on the CPU)
    forward_ms: float  # measured forward pass, timed separately (CUDA events on a GPU)
    device: str
    time_basis: str  # "gpu kernel time" | "cpu self time"
    config: dict[str, Any] = field(default_factory=dict)
    iters: int = 0
    top_ops: list[dict[str, Any]] = field(default_factory=list)  # plain profiler view, for cross-checks

    def entry(self, kernel_type: str) -> dict[str, Any] | None:
        return next((e for e in self.entries if e["kernel_type"] == kernel_type), None)

    def classified(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["kernel_type"] != "other"]

    def matmul_share_incl_mlp(self) -> float:
        """The matmul share when the MLP's GEMMs count as matmul (the usual profiler view)."""
        mm = self.entry("matmul")
        mlp = self.entry("fused_mlp")
        ms = (mm["gpu_ms"] if mm else 0.0) + (mlp.get("gemm_ms", 0.0) if mlp else 0.0)
        return ms / self.total_gpu_ms if self.total_gpu_ms else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "time_basis": self.time_basis,
                "total_gpu_ms": self.total_gpu_ms, "forward_ms": self.forward_ms, "iters": self.iters,
                "config": self.config, "matmul_share_incl_mlp": self.matmul_share_incl_mlp(),
                "entries": self.entries, "top_ops": self.top_ops}


# -- instrumentation ----------------------------------------------------------------------------

def module_kernel_type(m: nn.Module) -> str | None:
    """The kernel type a whole module computes (the first registered type whose hooks claim it), or
    None when its parts are classified separately."""
    return next((t for t in registry.kernel_types() if registry.hooks(t).claims_module(m)), None)


def _module_shapes(kind: str, m: nn.Module, args: tuple) -> list[dict[str, int]]:
    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if x is None:
        return []
    return registry.hooks(kind).module_shapes(m, x)


class Tracker:
    """Shape records of the composite ranges, made in Python while the profiler runs."""

    def __init__(self) -> None:
        self.active = False
        self.calls: Counter = Counter()  # kernel type -> calls
        self.shapes: dict[str, Counter] = defaultdict(Counter)  # kernel type -> shape tuple -> count
        self.labels: dict[str, Counter] = defaultdict(Counter)

    def record(self, kind: str, label: str, shapes: list[dict[str, int]]) -> None:
        if not self.active:
            return
        self.calls[kind] += 1
        self.labels[kind][label] += 1
        for s in shapes:
            self.shapes[kind][tuple(s.items())] += 1

    def reset(self) -> None:
        self.calls.clear()
        self.shapes.clear()
        self.labels.clear()


class _Instrumenting:
    """What a type's hooks get to wrap functions in its profiler range (Hooks.instrument)."""

    def __init__(self, kind: str, tracker: Tracker, stack: ExitStack):
        self.kind, self.tracker, self.stack = kind, tracker, stack

    def patch(self, obj: Any, attr: str, new: Any) -> None:
        self.stack.callback(setattr, obj, attr, getattr(obj, attr))
        setattr(obj, attr, new)

    def on_exit(self, fn: Callable[[], Any]) -> None:
        self.stack.callback(fn)

    @contextmanager
    def range(self, label: str, shapes: list[dict[str, int]]) -> Iterator[None]:
        self.tracker.record(self.kind, label, shapes)
        with record_function(f"{RANGE_PREFIX}{self.kind}::{label}"):
            yield


@contextmanager
def instrument(model: nn.Module) -> Iterator[Tracker]:
    """Add the classification ranges to `model` (and transformers' functions) for the duration."""
    tracker = Tracker()
    handles = []
    open_ranges: dict[int, list] = defaultdict(list)

    for m in model.modules():
        kind = module_kernel_type(m)
        if kind is None:
            continue
        label = type(m).__name__

        def pre(mod, args, _kind=kind, _label=label):
            tracker.record(_kind, _label, _module_shapes(_kind, mod, args))
            rf = record_function(f"{RANGE_PREFIX}{_kind}::{_label}")
            rf.__enter__()
            open_ranges[id(mod)].append(rf)

        def post(mod, args, output):
            stack = open_ranges[id(mod)]
            if stack:
                stack.pop().__exit__(None, None, None)

        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))

    try:
        with ExitStack() as stack:
            for kind in registry.kernel_types():
                registry.hooks(kind).instrument(_Instrumenting(kind, tracker, stack))
            yield tracker
    finally:
        for h in handles:
            h.remove()


# -- attribution ----------------------------------------------------------------------------------

def _op_shape(kind: str, name: str, shapes: list[list[int]]) -> dict[str, int] | None:
    """A shape dict in the spec's keys from an aten op's recorded input shapes."""
    ts = [s for s in shapes if isinstance(s, (list, tuple)) and len(s) > 0]
    try:
        return registry.hooks(kind).op_shape(name, ts)
    except (IndexError, TypeError):
        return None


def _classify(evt: Any, cache: dict[int, tuple], ops: dict[str, str]) -> tuple[str, str, Any]:
    """(kernel type, label, the op node that counts as the call) for one profiler event."""
    key = id(evt)
    if key in cache:
        return cache[key]
    node, best = evt, None
    while node is not None:
        name = node.name
        if name.startswith(RANGE_PREFIX):
            _, kind, label = name.split("::", 2)
            best = (kind, label, node)
            break
        if name in ops:
            best = (ops[name], name, node)  # keep walking: the outermost known op wins
        node = node.cpu_parent
    result = best or ("other", evt.name, None)
    cache[key] = result
    return result


def _own_time_us(evt: Any, on_gpu: bool) -> float:
    if on_gpu:
        # A record_function range also shows up on the GPU timeline as an annotation spanning its
        # kernels; the profiler may link it back to the range like a kernel. It has the range's
        # name, real kernels never do: leaving it out keeps every kernel counted once.
        return float(sum(k.duration for k in evt.kernels if k.name != evt.name))
    return float(evt.self_cpu_time_total)


def _is_annotation(evt: Any) -> bool:
    return bool(getattr(evt, "is_user_annotation", False)) or evt.name.startswith((RANGE_PREFIX, "autokernel."))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_forward(bundle: ModelBundle, iters: int = 10, warmup: int = 2, model: nn.Module | None = None,
                 inputs: Any = None, cpu_budget_s: float = 2.0) -> float:
    """Median milliseconds of one forward pass: CUDA events on a GPU, `iters` times. On the CPU
    perf_counter with torch pinned to one thread (autokernel.cpu_timing), at least `iters` times
    and more while under `cpu_budget_s`: a default thread pool on a busy machine is noise."""
    if bundle.device.type != "cuda":
        from autokernel.cpu_timing import pinned_threads, repeat

        with torch.inference_mode(), pinned_threads():
            for _ in range(warmup):
                bundle.forward(inputs, model)
            samples = repeat(lambda: bundle.forward(inputs, model), min_runs=max(1, iters), budget_s=cpu_budget_s)
        return statistics.median(samples) * 1e3
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            bundle.forward(inputs, model)
        _sync(bundle.device)
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            bundle.forward(inputs, model)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def profile_model(bundle: ModelBundle, warmup: int = 3, iters: int = 5) -> ProfileResult:
    """Profile `iters` forward passes after `warmup` ones; entries ranked by time, "other" last.
    On the CPU torch is pinned to one thread for it (autokernel.cpu_timing)."""
    on_gpu = bundle.device.type == "cuda"
    if not on_gpu:
        # CPU self times with the default thread pool rank different ops from run to run
        from autokernel.cpu_timing import pinned_threads

        with pinned_threads():
            return _profile(bundle, warmup, iters, on_gpu)
    return _profile(bundle, warmup, iters, on_gpu)


def _profile(bundle: ModelBundle, warmup: int, iters: int, on_gpu: bool) -> ProfileResult:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with torch.inference_mode(), instrument(bundle.model) as tracker:
        for _ in range(warmup):
            bundle.forward()
        _sync(bundle.device)
        tracker.reset()
        tracker.active = True
        with profile(activities=activities, record_shapes=True) as prof:
            for _ in range(iters):
                with record_function("autokernel.forward"):
                    bundle.forward()
            _sync(bundle.device)
        tracker.active = False
    forward_ms = time_forward(bundle, iters=max(iters, 3), warmup=1)

    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU and not e.is_async]
    cache: dict[int, tuple] = {}
    ops = op_types()
    time_us: Counter = Counter()
    gemm_us: Counter = Counter()
    labels: dict[str, Counter] = defaultdict(Counter)
    other_ops: Counter = Counter()
    op_calls: Counter = Counter()
    op_shapes: dict[str, Counter] = defaultdict(Counter)
    for evt in events:
        kind, label, node = _classify(evt, cache, ops)
        own = _own_time_us(evt, on_gpu)
        if node is evt and evt.name in ops:
            # an outermost aten op of a known type outside any range: one call of that type
            op_calls[kind] += 1
            shape = _op_shape(kind, evt.name, list(evt.input_shapes or []))
            if shape is not None:
                op_shapes[kind][tuple(shape.items())] += 1
        if own <= 0:
            continue
        time_us[kind] += own
        labels[kind][label] += own
        if kind == "other":
            other_ops[evt.name] += own
        elif kind != "matmul" and _classify_ignoring_ranges(evt, ops) == "matmul":
            gemm_us[kind] += own
    if on_gpu:
        # kernels the profiler could not link to a CPU event still cost time: count them as other
        device_us = sum(e.device_time_total for e in prof.events()
                        if e.device_type != torch.autograd.DeviceType.CPU and not _is_annotation(e))
        linked = sum(time_us.values())
        if device_us > linked:
            time_us["other"] += device_us - linked
            other_ops["(kernels not linked to an op)"] += device_us - linked

    total_us = sum(time_us.values())
    dtype = bundle.dtype_name
    entries = []
    for kind, us in time_us.items():
        if kind == "other":
            continue
        calls = tracker.calls.get(kind, 0) + op_calls.get(kind, 0)
        shape_counts = tracker.shapes.get(kind, Counter()) + op_shapes.get(kind, Counter())
        entries.append(_entry(kind, us, total_us, calls, shape_counts, labels[kind], iters, dtype, gemm_us[kind]))
    entries.sort(key=lambda e: -e["gpu_ms"])
    other = _entry("other", time_us.get("other", 0.0), total_us, 0, Counter(), other_ops, iters, dtype, 0.0)
    other["top_ops"] = [{"name": n, "gpu_ms": round(us / iters / 1e3, 6)} for n, us in other_ops.most_common(8)]
    entries.append(other)

    top_ops = []
    plain = [a for a in prof.key_averages() if not a.key.startswith((RANGE_PREFIX, "autokernel."))]
    for avg in sorted(plain, key=lambda a: -(a.self_device_time_total if on_gpu else a.self_cpu_time_total))[:15]:
        us = avg.self_device_time_total if on_gpu else avg.self_cpu_time_total
        if us > 0:
            top_ops.append({"name": avg.key, "ms": round(us / iters / 1e3, 6), "calls": avg.count / iters})
    config = {**bundle.options(), "source": bundle.source, "model_config": bundle.config}
    return ProfileResult(model=bundle.name, entries=entries, total_gpu_ms=total_us / iters / 1e3,
                         forward_ms=forward_ms, device=_device_label(bundle.device),
                         time_basis="gpu kernel time" if on_gpu else "cpu self time", config=config,
                         iters=iters, top_ops=top_ops)


def _classify_ignoring_ranges(evt: Any, ops: dict[str, str]) -> str | None:
    node = evt
    found = None
    while node is not None and not node.name.startswith(RANGE_PREFIX):
        if node.name in ops:
            found = ops[node.name]
        node = node.cpu_parent
    return found


def _per_forward(n: float, iters: int) -> float | int:
    v = n / iters
    return int(v) if float(v).is_integer() else round(v, 3)


def _entry(kind: str, us: float, total_us: float, calls: int, shape_counts: Counter, labels: Counter,
           iters: int, dtype: str, gemm: float) -> dict[str, Any]:
    share = us / total_us if total_us else 0.0
    top = shape_counts.most_common(MAX_SHAPES)
    return {
        "kernel_type": kind,
        "label": ", ".join(n for n, _ in labels.most_common(3)),
        "gpu_ms": round(us / iters / 1e3, 6),
        "share": share,
        "calls": _per_forward(calls, iters),
        "shapes": [dict(s) for s, _ in top],
        "weights": [_per_forward(c, iters) for _, c in top],
        "dtype": dtype,
        "amdahl": round(1.0 / max(1.0 - share, 1e-6), 4),
        "gemm_ms": round(gemm / iters / 1e3, 6),
    }


def _device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"
