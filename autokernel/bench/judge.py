"""Inside the worker: judge one candidate end to end and turn every failure into an outcome.

Order: load (compile errors) -> five stages, each under its own alarm (stop at the first
failure) -> anti-cheat on the launches seen after each stage (its own kernels at all, and the
library's share of the work) -> GPU timing of the candidate, eager and torch.compile at the timed
shapes (time_candidate.py) -> roofline against the measured ceilings. On a CPU, when asked
(`gpu_compile`), the launches the stages made are compiled for sm_90 instead of timed. After
every call of the candidate the integrity snapshot (integrity.py) is compared: a candidate that
changed anything the judge trusts is a cheat, and the worker restarts.
"""

from __future__ import annotations

import signal
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from autokernel.bench import ceilings as ceil_mod
from autokernel.bench.between_calls import LeftBehind
from autokernel.bench.checks import CheckFailure
from autokernel.bench.gpu_compile import compile_stage, record_launches
from autokernel.bench.integrity import checker, outside_a_call
from autokernel.bench.introspection import refused
from autokernel.bench.launches import OutOfBoundsAccess, cheat_reason, library_reason, library_share, short_name
from autokernel.bench.result import (CHEAT, COMPILE_ERROR, CORRECT, CRASHED, INCORRECT, OOM, TIMEOUT, BenchResult,
                                     Laps, StageVerdict)
from autokernel.bench.stages import STAGE_FUNCS, StageContext
from autokernel.errors import KernelFileError
from autokernel.kernels import get_spec
from autokernel.kernels.spec import dtype_name
from autokernel.textfmt import tail

# Share of the candidate's time limit each stage may use at most (what is left bounds it too);
# smoke makes the first call, which includes Triton's JIT compile or a cold CUDA extension build.
STAGE_SHARE = {"smoke": 0.7, "shapes": 0.6, "stability": 0.4, "determinism": 0.3, "edge": 0.4}
ERROR_CHARS = 3000  # what a verdict keeps of a crash's traceback (its end)
BASELINE_S = 240.0  # eager + torch.compile of the reference per shape, and the ceilings, on a cold cache


class StageTimeout(BaseException):
    """A stage's alarm. Not an Exception, so that `except Exception` (the kernel file's import
    wrapper, a candidate's own handlers) cannot turn a hang into a crash or a compile error."""


_armed = [False]  # a list, not a rebound global: the integrity snapshot's copy of this module stays equal


def on_alarm(signum, frame):
    if _armed[0]:
        raise StageTimeout()


def arm(seconds: float) -> None:
    """Raise StageTimeout after `seconds`, then again every 0.25 s until disarmed: code that
    swallows one exception (Triton, torch and candidates have broad excepts) cannot hide a hang."""
    _armed[0] = True
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)


def disarm() -> None:
    _armed[0] = False
    signal.setitimer(signal.ITIMER_REAL, 0)


def environment() -> dict:
    info = ceil_mod.device_info()
    info["interpreted"] = not torch.cuda.is_available()
    info["device"] = "cuda" if torch.cuda.is_available() else "cpu"
    return info


def root_cause(exc: BaseException) -> BaseException:
    """The original exception: the Triton interpreter wraps what a kernel raises (our stage alarm
    and bounds check included) in an InterpreterError."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or exc.__context__
        if nxt is None or type(exc).__name__ != "InterpreterError":
            break
        exc = nxt
    return exc


def classify(exc: BaseException) -> tuple[str, bool]:
    """(outcome, the CUDA context is poisoned and the worker must restart)."""
    exc = root_cause(exc)
    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, StageTimeout):
        return TIMEOUT, False
    if isinstance(exc, OutOfBoundsAccess):
        return CRASHED, False
    if isinstance(exc, KernelFileError) or name in ("CompilationError", "CompileTimeAssertionFailure",
                                                       "BuildError", "CudaBuildError", "CalledProcessError"):
        return COMPILE_ERROR, False
    if "Error building extension" in text or "ninja" in text.lower() and "error" in text.lower():
        return COMPILE_ERROR, False
    if (isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower()
            or "can't allocate memory" in text):
        return OOM, False
    if name == "AcceleratorError" or "CUDA error" in text or "illegal memory access" in text or "CUBLAS_STATUS" in text:
        return CRASHED, True
    return CRASHED, False


def exception_detail(exc: BaseException, outcome: str) -> str:
    """A stage's detail for what it raised; never a bare `Name: ` (a timeout carries no message)."""
    if outcome == TIMEOUT:
        return "exceeded its time limit"
    text = str(exc)[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Tampered(Exception):
    """After a call of the candidate, something the judge trusts is not as it was."""


TAMPERED_WORKER = "the bench worker was tampered with; restart it"
_snapshots: list = []  # the worker's integrity snapshot, taken before the first candidate is imported


def _integrity():
    """The snapshot of everything the judge trusts (integrity.py), taken once per worker."""
    if not _snapshots:
        from autokernel.bench import (across_calls, gpu_compile, screen, stages, time_candidate,  # noqa: F401
                                      timing)  # (snapshotted)
        from autokernel.bench.integrity import judge_snapshot
        from autokernel.kernels import KERNEL_TYPES, get_spec

        _snapshots.append(judge_snapshot(specs=[get_spec(t) for t in KERNEL_TYPES]))
    return _snapshots[0]


def integrity_guard() -> Callable[[], None]:
    """One judgement's integrity check, made before its candidate is imported: it raises Tampered
    naming what changed since the worker's snapshot. The comparison is integrity.checker's private
    copy, and what this closure calls is bound now, so a candidate that rewrites the judge's
    modules (the checker's code included) is still seen doing it; the judge holds the closure only
    in its locals and passes it on as an argument."""
    check = checker(_integrity())

    def verify(check=check, outside=outside_a_call, tampered=Tampered) -> None:
        changed = check() or outside()
        if changed:
            raise tampered(f"the candidate modified the bench itself ({changed})")

    return verify


def fresh_guard() -> Callable[[], None] | None:
    """integrity_guard() for a judgement, or None when a previous candidate got past the checks
    (the snapshot is taken here when it is the first): never judge or screen again in this process."""
    verify = integrity_guard()
    try:
        verify()
    except Tampered:
        return None
    return verify


def _stage_limit(name: str, timeout_s: float, deadline: float) -> float:
    return max(0.5, min(STAGE_SHARE[name] * timeout_s, deadline - time.monotonic() - 0.5))


def end_judgement(old_handler, cuda: bool, recording=None, empty_cache: bool = False) -> bool:
    """What ends every judgement, whatever happened in it: the alarm off, the launch recording
    closed, SIGALRM's handler back, the device synchronized. True when the device is broken (the
    worker must restart)."""
    disarm()
    if recording is not None:
        recording.__exit__(None, None, None)
    signal.signal(signal.SIGALRM, old_handler)
    if cuda:
        try:
            torch.cuda.synchronize()
            if empty_cache:
                torch.cuda.empty_cache()
        except Exception:
            return True
    return False


def request_target(req: dict) -> tuple[Any, bool, str]:
    """(spec, cuda, device) of a request: its kernel type's spec (KeyError for an unknown type)
    and where it runs."""
    cuda = torch.cuda.is_available()
    return get_spec(req["kernel_type"]), cuda, "cuda" if cuda else "cpu"


def request_dtype(req: dict, cuda: bool) -> str:
    """The dtype a request names, or the default of the machine (bfloat16 on a GPU, float32 on the CPU)."""
    return dtype_name(req.get("dtype") or ("bfloat16" if cuda else "float32"))


def load_candidate(req: dict, timeout_s: float):
    """(KernelFile, module) of the request's kernel file, imported under the load stage's alarm (half
    the time limit; still armed on return)."""
    from autokernel.bench.introspection import start_judgement
    from autokernel.kernelfile import import_kernel, parse_source

    start_judgement()  # from here on, no frame, gc walk or ctypes for the candidate's code
    arm(max(0.5, 0.5 * timeout_s))
    kf = parse_source(req["source"], Path(req["path"]) if req.get("path") else None)
    return kf, import_kernel(kf)


def judge_request(req: dict) -> dict:
    try:
        spec, cuda, device = request_target(req)
    except KeyError as exc:
        return {"bench_error": str(exc)}
    if req["backend"] == "cuda" and not cuda:
        return {"bench_error": "CUDA C++ kernels need a CUDA GPU; this machine has none "
                               "(Triton kernels run here under the interpreter)"}
    dt = request_dtype(req, cuda)
    shapes = req.get("shapes") or (spec.default_shapes if cuda else spec.small_shapes)
    shapes = [spec.canonical_shape(s) for s in shapes]
    weights = req.get("weights") or [1.0] * len(shapes)
    if len(weights) != len(shapes):
        return {"bench_error": f"{len(weights)} weights for {len(shapes)} shapes"}
    timeout_s = float(req.get("timeout_s") or 600)
    deadline = time.monotonic() + timeout_s
    res = BenchResult(kernel_type=spec.name, backend=req["backend"], dtype=dt, shape=shapes[0],
                      device=environment()["name"], gpu_timing=False)
    res.extra.update(config=req.get("config") or {}, shapes=shapes, weights=weights, interpreted=not cuda)
    restart = False
    verify = fresh_guard()
    if verify is None:
        return {"bench_error": TAMPERED_WORKER, "restart": True}
    old = signal.signal(signal.SIGALRM, on_alarm)
    stage = "load"
    recording = None
    lap = Laps(res.extra.setdefault("phases_s", {}))  # seconds per phase, for the loop's log
    try:
        from autokernel.kernelfile import entry_point

        kf, mod = load_candidate(req, timeout_s)
        disarm()
        verify()  # what it did at import
        lap("load")
        ctx = StageContext(spec=spec, fn=entry_point(mod), device=device, dtype=dt, shapes=shapes,
                           quick=bool(req.get("quick")), deterministic=kf.deterministic, interpreted=not cuda,
                           module_name=mod.__name__, nondeterminism_reason=kf.nondeterminism_reason,
                           verify=verify)
        # on the CPU the interpreter runs what the GPU compiler may reject: record the launches the
        # stages make and, once they pass, lower them to Triton IR for sm_90 (gpu_compile.py)
        if req.get("gpu_compile") and not cuda and req["backend"] == "triton":
            recording = record_launches()
            recording.__enter__()
        for name, func in STAGE_FUNCS:
            stage = name
            arm(_stage_limit(name, timeout_s, deadline))
            try:
                verdict = func(ctx)
            except CheckFailure as exc:
                verdict = StageVerdict(name, "fail", str(exc))
            disarm()
            lap(name)
            res.stages.append(verdict)
            if name == "smoke":
                res.launched_kernels = [short_name(n) for n in ctx.launches.names()][:20]
                lib = sorted({short_name(n) for n in ctx.launches.gpu_kernels
                              if any(pat in n for pat in spec.library_kernel_patterns)})
                if lib:  # allowed next to its own kernels (e.g. a copy), but shown for review
                    res.extra["library_kernels"] = lib[:10]
            pats = spec.library_kernel_patterns
            why = cheat_reason(ctx.launches, pats, cuda) or library_reason(ctx.launches, pats, cuda)
            res.extra["library_share"] = round(library_share(ctx.launches, pats, cuda)[0], 4)
            if verdict.status == "pass" and why:
                res.outcome, res.error = CHEAT, why
                return {"result": res.to_dict(), "restart": False}
            if verdict.status == "fail":
                res.outcome, res.error = INCORRECT, f"{name}: {verdict.detail}"
                return {"result": res.to_dict(), "restart": False}
        if recording is not None:
            stage = "gpu-compile"
            if not compile_stage(recording, res, deadline):
                return {"result": res.to_dict(), "restart": False}
            lap("gpu-compile")
        stage = "timing"
        res.outcome = CORRECT
        if cuda:
            from autokernel.bench.time_candidate import time_all

            why = time_all(res, spec, ctx, shapes, weights, dt, req, deadline)
            disarm()
            lap("timing")
            if why:  # what it returned while timed was wrong, or work ran outside the timed stream
                res.outcome, res.error = CHEAT, f"timing: {why}"
                return {"result": res.to_dict(), "restart": False}
        else:
            res.extra["timing"] = "none: Triton interpreter on the CPU; timings would not be GPU timings"
        if req.get("programs") and req["backend"] == "triton":
            stage = "program"  # which program it runs at each shape: the loop's screen compares later ones
            from autokernel.bench.programs import at_shapes

            arm(max(1.0, min(60.0, deadline - time.monotonic())))
            res.extra.update(at_shapes(ctx.fn, spec, shapes, dt, device, cuda, verify))
            disarm()
            lap("program")
        verify()  # the last word: whatever it left changed, from the judgement's own check
    except (Tampered, LeftBehind) as exc:  # never judge again in this process
        disarm()
        res.outcome, res.error = CHEAT, (f"timing: {exc}" if isinstance(exc, LeftBehind) else str(exc))
        return {"result": res.to_dict(), "restart": True}
    except BaseException as exc:  # the candidate is untrusted: anything it raises is a result
        disarm()
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not isinstance(exc, SystemExit):
            raise
        outcome, restart = classify(exc)
        exc = root_cause(exc)
        res.outcome = outcome
        if stage != "load" and stage != "timing" and not any(s.name == stage for s in res.stages):
            res.stages.append(StageVerdict(stage, "error", exception_detail(exc, outcome)))
        if outcome == TIMEOUT:
            res.error = f"{stage}: exceeded its time limit"
        elif isinstance(exc, KernelFileError):
            res.error = exc.one_line()
        else:
            res.error = tail(f"{stage}: " + "".join(traceback.format_exception(exc)), ERROR_CHARS)
        if outcome == CORRECT:
            res.outcome = CRASHED
        looked = refused()  # a refusal it did not catch is why it crashed: the verdict says so
        if looked:
            res.outcome, res.error, restart = CHEAT, f"the candidate modified the bench itself ({looked})", True
    finally:
        restart = end_judgement(old, cuda, recording) or restart
    return {"result": res.to_dict(), "restart": restart}
