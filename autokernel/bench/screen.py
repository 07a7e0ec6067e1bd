"""Inside the worker: the cheap screen of one candidate, before any full judgement (issue 18).

A candidate the search proposes is most often slower than the kernel's best; the five stages and
the full timing (every model shape, eager and torch.compile beside it) cost seconds to tens of
seconds each. The screen costs one import, one smoke check at a small shape, one check at the
kernel's heaviest model shape (the one where the model spends the most time in the op) and a short
timing there: SCREEN_REPS repetitions at least, SCREEN_TIME_S of them at most, with the same
timing function (L2 flushed, host kept ahead) as the full judgement, so the caller compares it
with the best version's full timing at the same shape. No baselines and no ladder of stages:
whatever passes the screen still goes through the whole judgement before it can be kept. The
judge's rules that cost nothing extra hold here too (issue 19): the integrity snapshot is taken
before the import and compared after it and after every call (a candidate that patches the judge,
the specs or torch is a cheat and the worker restarts, so the full judgement never runs in a
tampered process), the smoke check refills its inputs in place and keeps its outputs in the
ledger, and a candidate whose library ops do the work is a cheat already here.

Without a GPU no time is taken (the caller's CPU timing wrapper adds one, as for the judgement).

`programs` (the best version's program at each model shape, heaviest first; bench/programs.py): the
candidate's are named shape by shape while they are equal, and `same_program` says whether all were.

`checked` (the loop's back-to-back comparison of a near miss with the best, paired.py): here the
timing decides a keep, so it is the full judgement's at that shape, not the screen's short one:
inputs given new values before every repetition, sampled outputs checked against the reference,
the tail after the last call and the library share of a profiled call (time_candidate.py). A
screen's plain timing reuses one set of inputs, which a candidate that caches its output by
address would pass at no cost; it only decides who goes on to the judgement, never a keep.
"""

from __future__ import annotations

import signal
import traceback

import torch

from autokernel.bench import judge
from autokernel.bench.across_calls import secret_int
from autokernel.bench.checks import CheckFailure, make_inputs
from autokernel.bench.launches import cheat_reason, library_reason
from autokernel.bench.result import CHEAT, CORRECT, CRASHED, INCORRECT, TIMEOUT, BenchResult, Laps, StageVerdict
from autokernel.bench.stages import StageContext, smoke
from autokernel.errors import KernelFileError
from autokernel.kernels.spec import to_dtype

SCREEN_REPS = 10
SCREEN_TIME_S = 0.05
SCREEN_MAX_REPS = 200
# checked timings (paired.py): a median over hundreds of calls, so that one round's ratio of two
# timings moves by a few tenths of a percent, not by the spread of single calls
CHECKED_REPS = 100
CHECKED_TIME_S = 0.2


def screen_request(req: dict, notify=None) -> dict:
    """{"result": BenchResult} of the screen (latency_us at req["shapes"][0]), or {"bench_error"}."""
    try:
        spec, cuda, device = judge.request_target(req)
    except KeyError as exc:
        return {"bench_error": str(exc)}
    dt = judge.request_dtype(req, cuda)
    shapes = req.get("shapes") or [spec.small_shapes[0]]
    shape = spec.canonical_shape(shapes[0])
    timeout_s = float(req.get("timeout_s") or 120)
    res = BenchResult(kernel_type=spec.name, backend=req["backend"], dtype=dt, shape=shape,
                      device=judge.environment()["name"], gpu_timing=False)
    res.extra.update(screen=True, config=req.get("config") or {}, shapes=[shape], weights=[1.0],
                     interpreted=not cuda, checked=bool(req.get("checked")))
    verify = judge.fresh_guard()
    if verify is None:
        return {"bench_error": judge.TAMPERED_WORKER, "restart": True}
    # seconds per phase (the loop's log shows them): where a screen's time goes, compile included
    lap = Laps(res.extra.setdefault("phases_s", {}))
    old = signal.signal(signal.SIGALRM, judge.on_alarm)
    stage = "load"
    restart = False
    try:
        from autokernel.kernelfile import entry_point

        kf, mod = judge.load_candidate(req, timeout_s)
        verify()  # what it did at import
        lap("load")
        fn = entry_point(mod)
        ctx = StageContext(spec=spec, fn=fn, device=device, dtype=dt, shapes=[shape], quick=True,
                           deterministic=kf.deterministic, interpreted=not cuda, module_name=mod.__name__,
                           nondeterminism_reason=kf.nondeterminism_reason, verify=verify)
        stage = "smoke"
        judge.arm(max(0.5, 0.8 * timeout_s))
        try:
            verdict = smoke(ctx)
            ctx.check(shape, dt)
            verdict.detail += f"; {spec.shape_label(shape)} (the heaviest model shape)"
        except CheckFailure as exc:
            res.stages.append(StageVerdict("smoke", "fail", str(exc)))
            res.outcome, res.error = INCORRECT, f"screen: {exc}"
            return {"result": res.to_dict(), "restart": False}
        res.stages.append(verdict)
        lap("smoke")  # the first calls: Triton's compile of the candidate's kernels is here
        pats = spec.library_kernel_patterns
        why = cheat_reason(ctx.launches, pats, cuda) or library_reason(ctx.launches, pats, cuda)
        if why:
            res.outcome, res.error = CHEAT, f"screen: {why}"
            return {"result": res.to_dict(), "restart": False}
        if cuda:
            stage = "timing"
            from autokernel.bench import timing
            from autokernel.bench.between_calls import LeftBehind

            try:
                if req.get("checked"):
                    t, args, why = checked_timing(ctx, spec, shape, dt, device)
                    if why:
                        res.outcome, res.error = CHEAT, f"checked timing: {spec.shape_label(shape)}: {why}"
                        return {"result": res.to_dict(), "restart": False}
                else:
                    args = make_inputs(spec, shape, to_dtype(dt), device, secret_int(3))
                    t = timing.time_call(fn, args, device, min_reps=SCREEN_REPS, min_time_s=SCREEN_TIME_S,
                                         max_reps=SCREEN_MAX_REPS, verify=verify)
            except LeftBehind as exc:  # what it left behind stays in this process: a new worker
                res.outcome, res.error = CHEAT, f"screen: timing: {exc}"
                return {"result": res.to_dict(), "restart": True}
            wall = timing.wall_call(fn, args, min_time_s=SCREEN_TIME_S / 5, max_reps=SCREEN_MAX_REPS)
            verify()  # e.g. torch.cuda.Event patched while timed
            lap("timing")
            res.latency_us, res.latency_iqr_us, res.wall_us, res.gpu_timing = t["median_us"], t["iqr_us"], wall, True
            res.extra["per_shape"] = [{"shape": shape, "dtype": dt, "weight": 1.0, "latency_us": t["median_us"],
                                       "iqr_us": t["iqr_us"], "reps": t["reps"], "wall_us": wall}]
        best = req.get("programs")
        if best and not req.get("checked") and req["backend"] == "triton":
            stage = "program"  # the same program as the best at every model shape? (programs.py)
            from autokernel.bench.programs import at_shapes

            res.extra.update(at_shapes(fn, spec, [spec.canonical_shape(b["shape"]) for b in best], dt, device,
                                       cuda, verify, best=[b.get("program") for b in best]))
            lap("program")
        judge.disarm()
        verify()  # the last word: whatever it left changed
        res.outcome = CORRECT
    except judge.Tampered as exc:  # never judge again in this process
        judge.disarm()
        res.outcome, res.error, restart = CHEAT, f"screen: {exc}", True
    except BaseException as exc:  # the candidate is untrusted: anything it raises is a result
        judge.disarm()
        if isinstance(exc, KeyboardInterrupt):
            raise
        outcome, restart = judge.classify(exc)
        res.outcome = CRASHED if outcome == CORRECT else outcome
        if isinstance(exc, KernelFileError):
            res.error = exc.one_line()
        elif outcome == TIMEOUT:
            res.error = f"screen {stage}: exceeded its time limit"
        else:
            res.error = f"screen {stage}: " + "".join(traceback.format_exception(exc))[-3000:]
        if stage != "load":
            res.stages.append(StageVerdict("smoke", "error", judge.exception_detail(exc, outcome)))
    finally:
        restart = judge.end_judgement(old, cuda) or restart
    return {"result": res.to_dict(), "restart": restart}


def checked_timing(ctx, spec, shape: dict, dt: str, device: str) -> tuple[dict, tuple, str | None]:
    """(timing, the inputs, why it is a cheat or None): the full judgement's timing at one shape
    (time_candidate.py), longer than the screen's and as closely checked."""
    from autokernel.bench.across_calls import Refill
    from autokernel.bench.time_candidate import timed_at_shape

    refill = Refill(spec, shape, to_dtype(dt), device)
    t, why, _ = timed_at_shape(ctx, spec, refill, device, min_reps=CHECKED_REPS, min_time_s=CHECKED_TIME_S)
    return t, refill.args, why
