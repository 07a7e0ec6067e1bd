"""A loop run's frame, around its experiments (autokernel/loop.py): the events it reports, what it
needs before the first experiment (the model's kernels, the bench's judge and screen), the guards
that make an interruption clean, and its summary from the store. Library code: nothing printed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from autokernel.errors import AutoKernelError, ConfigError, NotFoundError
from autokernel.orchestrator import Orchestrator, run_elapsed_s

Judge = Callable[..., Any]  # (source, kernel_type=, shapes=, weights=, dtype=, quick=, timeout_s=) -> BenchResult


@dataclass
class LoopEvent:
    kind: str  # stage | baseline | start | done | proposer_failed | exhausted | state | verify
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    run_id: Optional[int] = None  # set on every event once the run's row exists


@dataclass
class LoopSummary:
    run_id: int
    status: str  # finished | interrupted
    model: str
    agent: str
    experiments: int = 0  # non-baseline experiments in the run (all sessions)
    starting_points: int = 0  # baseline rows: each kernel's start, judged once per run
    kept: int = 0
    elapsed_s: float = 0.0
    predicted_speedup: float = 1.0
    kernels: list[dict[str, Any]] = field(default_factory=list)
    median_experiment_s: Optional[float] = None
    screened: int = 0  # candidates the screen timed (all kernels)
    screened_out: int = 0  # ... and stopped before the full judgement
    median_screen_s: Optional[float] = None  # what a candidate the screen stopped cost, median
    paired: int = 0  # near misses timed back to back with the best (autokernel.paired)
    paired_kept: int = 0  # ... and kept on that pair's verdict
    stop_reason: str = ""
    verify: Optional[dict[str, Any]] = None
    verify_error: Optional[str] = None
    timing: str = "gpu"  # gpu | cpu: what the latencies are (CPU: autokernel.cpu_timing)
    judges: list[dict[str, Any]] = field(default_factory=list)  # a pooled run's judges (autokernel.throughput)
    throughput: Optional[dict[str, Any]] = None  # ... and its totals: candidates per hour, per GPU-hour, idle

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ensure_kernels(store, workspace, *, model: str, backend: str, kernel_types: list[str] | None, batch: int,
                   seq: int | None, dtype: str | None, device: str | None, top: int, emit) -> list:
    """The model's kernels of this backend; profiled and extracted first when the store has none."""
    kernels = [k for k in store.list_kernels(model=model) if k.backend == backend]
    if not kernels:
        from autokernel.extract import extract
        from autokernel.models import load_model
        from autokernel.profile import profile_model

        emit(LoopEvent("stage", f"profiling {model} (nothing in the store for it yet)"))
        bundle = load_model(model, batch=batch, seq=seq, dtype=dtype, device=device)
        result = profile_model(bundle)
        profile = store.add_profile(result.model, result.entries, config=result.config, device=result.device,
                                    total_gpu_ms=result.total_gpu_ms, forward_ms=result.forward_ms)
        del bundle
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():  # the bench child needs the memory the model held here
            torch.cuda.empty_cache()
        emit(LoopEvent("stage", f"extracting the top {top} kernels of profile {profile.id}"))
        extract(store, workspace, profile_id=profile.id, top=top, backend=backend,
                on_skip=lambda name, why: emit(LoopEvent("stage", f"skipped {name}: {why}")))
        kernels = [k for k in store.list_kernels(model=profile.model) if k.backend == backend]
    if kernel_types:
        kernels = [k for k in kernels if k.kernel_type in kernel_types]
    if not kernels:
        raise NotFoundError(f"no {backend} kernels to optimize for {model}"
                            + (f" among {', '.join(kernel_types)}" if kernel_types else ""))
    return kernels


def baselines_due(rows, kernel_ids, device: Optional[str]) -> dict[int, Optional[str]]:
    """The kernels that need a starting point judged now: those without one in this run (None), and,
    when `device` is known, those whose best so far (the latest start or keep) or whose library
    timings (the latest start's) were timed on another device: that device's name. A run resumed on
    another card (an H100's timings, an H200 now) compares candidates with the best and the library
    timed again here, not with the other card's numbers; run 9 went H100, H200, H100, and its H200
    keep was the best the third call had to beat."""
    start: dict[int, Any] = {}
    best: dict[int, Any] = {}
    for e in sorted(rows, key=lambda e: e.number):
        if e.proposer == "baseline" and e.status != "abandoned":
            start[e.kernel_id] = best[e.kernel_id] = e
        elif e.status == "kept":
            best[e.kernel_id] = e
    due: dict[int, Optional[str]] = {}
    for kid in kernel_ids:
        if kid not in start:
            due[kid] = None
            continue
        elsewhere = [e.device for e in (best[kid], start[kid]) if device and e.device and e.device != device]
        if elsewhere:
            due[kid] = elsewhere[0]
    return due


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def stamped(emit: Callable[[LoopEvent], None], run_id: int) -> Callable[[LoopEvent], None]:
    """`emit` with the run's id set on every event (the CLI's log file is named after it)."""
    def emit_for_run(event: LoopEvent) -> None:
        if event.run_id is None:
            event.run_id = run_id
        emit(event)
    return emit_for_run


def reopen_run(store, run, kind: str, emit):
    """A run resumed by this process: of the right kind, rows a dead process left "running" marked
    abandoned, and the run itself running again under this pid."""
    if run.kind != kind:
        raise ConfigError(f"run {run.id} is a {run.kind} run, not a {kind} run")
    n = store.abandon_running(run.id)
    if n:
        emit(LoopEvent("stage", f"run {run.id}: {n} experiment(s) left running by a dead process marked abandoned"))
    return store.update_run(run.id, status="running", pid=os.getpid(), finished_at=None)


def run_guarded(store, run_id: int, work: Callable[[], str], worker=None) -> tuple[str, str]:
    """(status, reason) of a run's work (which returns why it stopped): Ctrl-C is an interrupted
    run, any other failure marks the run failed and propagates; the worker is closed either way."""
    try:
        return "finished", work()
    except KeyboardInterrupt:
        return "interrupted", "interrupted by the user"
    except BaseException:
        store.finish_run(run_id, "failed")
        raise
    finally:
        if worker is not None:
            worker.close()


def cleanup_stale(workspace, emit) -> None:
    """Remove the worktrees a dead process left behind."""
    removed = workspace.cleanup_stale()
    if removed:
        emit(LoopEvent("stage", f"removed {len(removed)} stale worktree(s)"))


def default_judge(store, emit, gpu_compile: bool = False,
                  env: Optional[dict[str, str]] = None) -> tuple[Judge, Any, dict[str, Any]]:
    """The long-lived bench worker (warm caches, isolation per candidate) with the device's measured
    ceilings; on a machine without a GPU, wrapped with CPU wall-clock timing, and with `gpu_compile`
    a correct candidate must also compile for sm_90 (the interpreter runs code the compiler rejects).
    Triton's and Inductor's compile caches live under the home (compile artefacts survive the worker
    and the run); a sandboxed worker keeps them in the sandbox's scratch folder instead (the home is
    read-only there, bench/sandbox.py). `env` goes on top of this process's environment for the worker
    (--gpus 0 pins its GPU). Returns (judge, worker, {"ceilings": measured or None, "device": what the
    timings are, "name": the device its results name, "screen": the worker's cheap screen, timed the
    same way as the judge})."""
    import functools
    import platform
    from pathlib import Path

    import torch

    from autokernel.bench import calibrate, ceilings_of
    from autokernel.bench.runner import BenchWorker
    from autokernel.config import Paths
    from autokernel.cpu_timing import CPU_TIMING_NOTE, CPUTimedJudge

    cache = Paths(Path(store.path).parent).cache
    env = {**os.environ, **(env or {})}
    env.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    worker = BenchWorker(env=env)
    if not torch.cuda.is_available():
        emit(LoopEvent("stage", "no GPU: kernels run in the Triton interpreter; " + CPU_TIMING_NOTE))
        return (CPUTimedJudge(functools.partial(worker.judge, gpu_compile=gpu_compile)), worker,
                {"ceilings": None, "device": f"cpu {platform.machine()} (Triton interpreter)",
                 "name": worker.info.get("name"), "screen": CPUTimedJudge(worker.screen)})
    emit(LoopEvent("stage", "measuring the device's ceilings (once per device)"))
    device = calibrate(store, worker=worker)
    ceilings = ceilings_of(device)
    return (functools.partial(worker.judge, ceilings=ceilings), worker,
            {"ceilings": ceilings, "device": device.name, "name": worker.info.get("name") or device.name,
             "screen": worker.screen})


def verify_run(store, workspace, run_id: int, emit) -> tuple[Optional[dict], Optional[str]]:
    try:
        from autokernel.verify_isolated import verify_isolated
    except ImportError as exc:
        return None, f"verify is not available: {exc}"
    try:
        # only what the loop kept goes in: on a CPU every other kernel would be a starter run
        # through the interpreter for nothing (minutes on a non-tiny model); the kept kernels are
        # an LLM's code, so they run in the bench's sandbox, not in this process (it holds the key)
        result = verify_isolated(store, workspace, run_id=run_id, only_kept=True,
                                 progress=lambda message: emit(LoopEvent("stage", f"verify: {message}")))
    except AutoKernelError as exc:
        return None, exc.one_line()
    data = result.to_dict() if hasattr(result, "to_dict") else dict(getattr(result, "__dict__", {}))
    return json.loads(json.dumps(data, default=str)), None


def summarize(store, run_id: int, orch: Orchestrator | None = None, *, status: str = "finished",
              reason: str = "") -> LoopSummary:
    """The run's summary from the store alone (also what `--resume` and the report show)."""
    import statistics

    run = store.get_run(run_id)
    rows = store.list_experiments(run_id=run_id)
    if orch is None:
        ids = {e.kernel_id for e in rows}
        mode = json.loads(run.config_json or "{}").get("target_mode") or "compile"
        orch = Orchestrator.from_store(store, run_id, [store.get_kernel(i) for i in sorted(i for i in ids if i)],
                                       target_mode=mode)
    durations = [e.duration_s for e in rows if e.proposer != "baseline" and e.duration_s]
    stopped = [e.duration_s for e in rows if e.status == "screened" and e.duration_s]
    exps = [e for e in rows if e.proposer != "baseline"]
    snap = orch.snapshot()
    from autokernel.throughput import judge_stats, run_totals

    judges = judge_stats(store, run_id)
    return LoopSummary(run_id=run_id, status=status, model=run.model or "", agent=run.agent or "",
                       experiments=len(exps), starting_points=len(rows) - len(exps),
                       kept=sum(1 for e in exps if e.status == "kept"),
                       elapsed_s=run_elapsed_s(store, run_id), predicted_speedup=snap["predicted_speedup"],
                       kernels=snap["kernels"], stop_reason=reason,
                       median_experiment_s=statistics.median(durations) if durations else None,
                       screened=sum(1 for e in exps if e.screen_us is not None),
                       screened_out=sum(1 for e in exps if e.status == "screened"),
                       median_screen_s=statistics.median(stopped) if stopped else None,
                       paired=sum(1 for e in exps if e.paired_json),
                       paired_kept=sum(1 for e in exps if e.paired_json and e.status == "kept"),
                       judges=[j.to_dict() for j in judges],
                       throughput=run_totals(store, run_id, judges) if judges else None)
