"""One judge of a pool (autokernel/pool.py): what runs next to one GPU (a thread of the coordinator
driving a bench worker pinned to the GPU, or a Ray actor on a node of a cluster) and judges one
candidate at a time. It owns its bench worker children, its CPU-timing wrapper when the worker
finds no GPU, and its own references; it never touches the store or the git workspace (the
coordinator does, with what it returns).

Timings of different GPUs are never compared with each other. A judge times, once per kernel, the
run's starting version of the kernel itself (its *reference*: the starting kernel, and with it the
library's eager and torch.compile timings, all on its own GPU), once the first candidate of the
kernel it judges has passed its checks (a failing candidate costs no reference). A candidate is
timed against that reference, and its speed-up over the start (per shape) is put in the run's
frame: its per-shape times are the run's starting point's times divided by that speed-up, so
every later comparison (the keep rule, the screen, the search's objective) compares speed-ups
measured on one GPU each. The measured numbers stay in the result (extra["frame"]). The judge
that timed the starting point itself has it as its reference (scale 1). KernelBench's judge
times the problem's eager model in every judgement, so there the frame comes from that eager time.

No torch here: the judge's heavy work is in its worker processes.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from autokernel import objective, screening
from autokernel.bench.result import CRASHED, BenchResult
from autokernel.errors import AutoKernelError

TIME_FIELDS = ("latency_us", "eager_us", "compile_us", "wall_us", "eager_wall_us")


@dataclass
class JudgeTask:
    """One judgement, in plain values (it crosses to a thread or, pickled, to a Ray actor)."""

    kernel_id: int
    kind: str  # "baseline" (the run's starting point of the kernel) | "candidate"
    source: str
    kernel_type: str
    dtype: str
    shapes: Optional[list[dict]] = None
    weights: Optional[list[float]] = None
    timeout_s: float = 600.0
    quick: bool = False
    start_source: Optional[str] = None  # the kernel's starting version: the judge's reference
    start_shapes: list[dict] = field(default_factory=list)  # the starting point's per-shape times (the run's frame)
    start_eager_us: Optional[float] = None  # KernelBench: the starting point's eager time (the frame)
    library: bool = False  # the start timed the library: candidates are timed alone, the judge's own library copied
    plan: Optional[dict] = None  # {"shape", "best_us"}: screen at the heaviest shape against the best (run frame)
    margin: float = screening.MARGIN
    programs: Optional[list[dict]] = None  # the best's program per model shape, the screened shape first
    best_source: Optional[str] = None  # the best version: a candidate that differs only in config may run its program
    gpu_compile: bool = False
    problem: Any = None  # KernelBench: the Problem (judged by the KernelBench judge)


@dataclass
class JudgeOutcome:
    """What a judge returns: the result in the run's frame, the screen's row fields, its time."""

    result: Optional[BenchResult] = None
    extra: dict[str, Any] = field(default_factory=dict)  # screen_us, screen_best_us, the screened row's fields
    busy_s: float = 0.0  # wall time of the judgement on the judge (its reference included)
    reference_s: float = 0.0  # ... of which timing its own reference
    judge_error: Optional[str] = None  # the judge itself failed (not the candidate): no verdict
    died: bool = False  # the worker died under the candidate (it was restarted; the candidate failed)


def shape_scales(base_rows: list[dict], ref_rows: list[dict]) -> dict[str, float]:
    """Per shape: the starting point's time in the run's frame over the same start timed here."""
    ref = {objective.shape_key(r.get("shape")): r.get("latency_us") for r in ref_rows}
    out = {}
    for r in base_rows:
        key = objective.shape_key(r.get("shape"))
        if r.get("latency_us") and ref.get(key):
            out[key] = float(r["latency_us"]) / float(ref[key])
    return out


def to_run_frame(res: BenchResult, scales: dict[str, float], label: str) -> None:
    """Put a result timed on this judge into the run's frame (see the module docstring); ratios
    (speed-ups) are unchanged, the measured totals are kept in extra["frame"]."""
    rows = (res.extra or {}).get("per_shape") or []
    if res.latency_us is None or not rows or not scales:
        res.extra["frame"] = {"judge": label, "scale": None}
        return
    fallback = sum(scales.values()) / len(scales)
    measured = {f: getattr(res, f) for f in ("latency_us", "latency_iqr_us", "wall_us", "eager_us", "compile_us")}
    sums: dict[str, list[float]] = {}
    for r in rows:
        s = scales.get(objective.shape_key(r.get("shape")), fallback)
        w = float(r.get("weight") or 1.0)
        for f in TIME_FIELDS:
            if r.get(f) is not None:
                acc = sums.setdefault(f, [0.0, 0.0])
                acc[0] += w * r[f]
                acc[1] += w * r[f] * s
                r[f] = r[f] * s
        r["scale"] = s
    for f in ("latency_us", "wall_us", "eager_us", "compile_us"):
        acc = sums.get(f)
        if getattr(res, f) is not None and acc and acc[0] > 0:
            setattr(res, f, getattr(res, f) * acc[1] / acc[0])
    if res.latency_iqr_us is not None and measured["latency_us"]:
        res.latency_iqr_us *= res.latency_us / measured["latency_us"]
    res.extra["frame"] = {"judge": label, "scale": scales, "measured": measured}


def scale_result(res: BenchResult, s: float, label: str, why: str) -> None:
    """Every time of a result times one factor (KernelBench's eager-based frame)."""
    measured = {f: getattr(res, f) for f in ("latency_us", "latency_iqr_us", "wall_us", "eager_us", "compile_us")}
    for f, v in measured.items():
        if v is not None:
            setattr(res, f, v * s)
    res.extra["frame"] = {"judge": label, "scale": s, "measured": measured, "from": why}


class SlotJudge:
    """The judge of one slot. `env`: the worker processes' environment on top of this process's
    (CUDA_VISIBLE_DEVICES pins the GPU; an empty one means the CPU interpreter). Used from one
    thread at a time (a pool gives it one task at a time); on Ray it is the actor class itself."""

    def __init__(self, env: Optional[dict[str, str]] = None, label: str = "judge", family: str = "bench"):
        self.env = {**os.environ, **(env or {})}
        self.label = label
        self.family = family  # "bench" (kernels of a model) | "kb" (KernelBench problems): its main worker
        self.ceilings: Optional[dict] = None  # this GPU's measured ceilings (the coordinator's store has them)
        self.refs: dict[int, dict] = {}  # kernel id -> {"rows": per-shape times of the start here, "scales"}
        self._bench = None
        self._kb = None

    # -- its processes --------------------------------------------------------------------------

    def bench(self):
        if self._bench is None:
            from autokernel.bench.runner import BenchWorker

            self._bench = BenchWorker(env=self.env)
        return self._bench

    def kb(self):
        if self._kb is None:
            from autokernel.kb.evaluate import KBWorker

            self._kb = KBWorker(env=self.env)
        return self._kb

    def info(self) -> dict[str, Any]:
        """Its main worker's hello (device name, key, interpreted), starting it if needed."""
        import socket

        return {**(self.kb() if self.family == "kb" else self.bench()).info, "host": socket.gethostname()}

    def calibrate(self) -> dict[str, Any]:
        return self.bench().calibrate()

    def set_ceilings(self, ceilings: Optional[dict]) -> None:
        self.ceilings = ceilings

    def pid(self) -> int:
        return os.getpid()

    def worker_pids(self) -> list[int]:
        """Process ids of its live worker children (tests kill one to see the pool survive)."""
        return [w.pid for w in (self._bench, self._kb) if w is not None and w.alive()]

    def restarts(self) -> int:
        """Times a worker process of this judge was started again after it died or was killed."""
        return sum(max(0, w.restarts - 1) for w in (self._bench, self._kb) if w is not None)

    def _down(self) -> bool:
        """A worker that had started is dead now (it died, or was killed at a time limit)."""
        return any(w is not None and w.restarts > 0 and not w.alive() for w in (self._bench, self._kb))

    def restart(self) -> None:
        """Start again each of its workers that is down; one that fails is tried again (and its
        failure said, retiring the judge) at the next request."""
        for w in (self._bench, self._kb):
            if w is not None and not w.alive():
                try:
                    w.info
                except (AutoKernelError, OSError):
                    pass

    def close(self) -> None:
        for w in (self._bench, self._kb):
            if w is not None:
                try:
                    w.close()
                except Exception:  # noqa: BLE001 - a judgement still running in another thread lost its child
                    pass

    # -- judging --------------------------------------------------------------------------------

    def _judges(self, gpu_compile: bool):
        """(judge, screen) with the loop's calling convention; CPU wall-clock timing without a GPU."""
        worker = self.bench()
        if worker.info.get("interpreted"):
            from autokernel.cpu_timing import CPUTimedJudge

            return (CPUTimedJudge(functools.partial(worker.judge, gpu_compile=gpu_compile)),
                    CPUTimedJudge(worker.screen))
        return functools.partial(worker.judge, ceilings=self.ceilings), worker.screen

    def run(self, task: JudgeTask) -> JudgeOutcome:
        """Judge one task. Never raises: the judge's own failure is `judge_error` (no verdict)."""
        t0 = time.monotonic()
        out = JudgeOutcome()
        try:
            if task.problem is not None:
                out.result = self._kb_judgement(task)
            else:
                self._bench_judgement(task, out)
        except (AutoKernelError, OSError) as exc:
            out.judge_error = f"{self.label}: {exc.one_line() if isinstance(exc, AutoKernelError) else exc}"
        out.busy_s = time.monotonic() - t0
        # its worker died under the candidate (not killed at a time limit): started again now, so
        # the next candidate does not wait for it and the judge's row counts the restart
        out.died = self._down() and out.result is not None and out.result.outcome == CRASHED
        if out.died:
            self.restart()
        if out.result is not None:
            out.result.extra.setdefault("judge", self.label)
        return out

    def _kb_judgement(self, task: JudgeTask) -> BenchResult:
        res = self.kb().judge_for(task.problem, gpu_compile=task.gpu_compile)(
            task.source, quick=task.quick, timeout_s=task.timeout_s)
        if task.kind == "candidate" and res.correct and res.eager_us and task.start_eager_us:
            scale_result(res, task.start_eager_us / res.eager_us, self.label, "the problem's eager model, timed here")
        return res

    def _bench_judgement(self, task: JudgeTask, out: JudgeOutcome) -> None:
        judge, screen = self._judges(task.gpu_compile)
        kw = dict(kernel_type=task.kernel_type, shapes=task.shapes, weights=task.weights, dtype=task.dtype,
                  timeout_s=task.timeout_s, programs=True)  # its program per shape (bench/programs.py)
        if task.kind == "baseline":
            res = judge(source=task.source, quick=False, **kw)
            if res.correct and res.latency_us is not None:
                rows = (res.extra or {}).get("per_shape") or []
                self.refs[task.kernel_id] = {"rows": rows, "scales": shape_scales(rows, rows)}
            out.result = res
            return
        if task.plan is not None:
            shape = task.plan["shape"]
            skw = dict(source=task.source, kernel_type=task.kernel_type, shapes=[shape], weights=[1.0],
                       dtype=task.dtype, timeout_s=min(task.timeout_s, screening.SCREEN_TIMEOUT_S))
            if task.programs:
                skw["programs"] = task.programs
            got = screen(**skw)
            if not got.correct:  # a failed candidate needs no reference
                out.result = got
                return
            ref = self._reference(task, judge, kw, out)
            if ref is None:
                return
            scale = ref["scales"].get(objective.shape_key(shape), 1.0)

            def in_run_frame(res):
                if res.latency_us is not None:
                    res.extra["measured_us"] = res.latency_us
                    res.latency_us *= scale
                return res

            plan = screening.Plan(dict(shape), float(task.plan["best_us"]))
            got = screening.rescreened(in_run_frame(got), plan, task.margin, lambda: in_run_frame(screen(**skw)))
            out.extra = {"screen_us": got.latency_us, "screen_best_us": plan.best_us}
            stay = screening.left_at_screen(got, plan, task.margin, task.source, lambda: task.best_source)
            if stay is not None:
                out.extra.update(stay)
                out.result = got
                return
        res = judge(source=task.source, quick=False if task.plan is not None else task.quick,
                    baselines=not task.library, **kw)
        if res.correct:
            ref = self._reference(task, judge, kw, out)
            if ref is None:
                return
            if task.library:
                screening.fill_library(res, ref["rows"])  # the library as timed on this GPU
            to_run_frame(res, ref["scales"], self.label)
        out.result = res

    def _reference(self, task: JudgeTask, judge, kw: dict, out: JudgeOutcome) -> Optional[dict]:
        """The kernel's start as timed here, timed the first time a candidate of the kernel passes
        here (a failing candidate costs none); None when it cannot be timed (out.result says so)."""
        ref = self.refs.get(task.kernel_id)
        if ref is not None:
            return ref
        t0 = time.monotonic()
        got = judge(source=task.start_source, quick=False, **kw)
        out.reference_s += time.monotonic() - t0
        rows = (got.extra or {}).get("per_shape") or []
        if not (got.correct and got.latency_us is not None and rows):
            out.result = BenchResult(kernel_type=task.kernel_type, backend=got.backend, outcome=CRASHED,
                                     error=f"{self.label} could not time the kernel's start as its reference "
                                           f"({got.outcome}): {got.error or ''}"[:2000])
            return None
        ref = self.refs[task.kernel_id] = {"rows": rows, "scales": shape_scales(task.start_shapes, rows)}
        return ref
