"""What a candidate goes through before the full judgement, and what it reuses (issue 18).

1. Its identity: a candidate whose key (kernelfile.candidate_key: its effective configuration and
   the rest of its source) was judged before for the kernel is not judged again; no row is made.
2. The screen (bench/screen.py): a smoke check, a check at the kernel's heaviest model shape and a
   short timing there, compared with the best version's time at that shape (from its full
   timing). Only a candidate within `margin` of the best (by default 1.08x on a GPU, 1.2x on the
   CPU) goes on to the five stages and the full timing; the others get status "screened", with their
   screen time and the best's time at the shape in the row (the report counts those that were 3x
   slower or more).
3. A candidate that passes the screen but differs from the best only in tunables that leave every
   model shape's program as the best's (bench/programs.py names them) is not judged either: status
   "screened", its error says so. Whatever it would measure is the best's time again.
4. The library's timings (eager and torch.compile per shape, and eager's host time) are measured
   once per kernel and run, by the run's starting point, and copied into every later candidate's
   result instead of being timed again: the bench is asked for the candidate alone.

No torch here: the loop calls it between bench calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from autokernel import objective
from autokernel.bench.result import roofline_binds, too_good
from autokernel.declared import effective_fn
from autokernel.kernelfile import candidate_key, parse_source, rest_of

MARGIN = 1.2  # a screened candidate goes on when its time is within this factor of the best's
# On a GPU the screen tracks the full timing closely: over 329 fully judged candidates of two llama-7b
# loops (H100 and H200), screen / full time relative to the best was 0.95-1.03 (p5-p95), 1.061 at most,
# and every candidate that finished 1% or more under the best had screened at 1.038 or less; no
# candidate that screened at 1.05 or more was kept, and 118 of run 3's 180 full judgements were such.
# The CPU's interpreter timings are noisier (see RECHECK): it keeps MARGIN.
GPU_MARGIN = 1.08
SLOW = 3.0  # the report counts candidates at least this much slower than the best
# A candidate the short screen puts between MARGIN and this factor of the best is screened once more
# and stopped only if that agrees: a busy host (CI's two cores) once put the best's own configuration
# past the margin. The far-off candidates the screen is for are stopped at once.
RECHECK = 2.0
SCREEN_TIMEOUT_S = 120.0
SAME_PROGRAM = "same program as the best"  # how a row left at its screen for that begins its error
# CPU wall-clock timings include the host's Python, which a program does not: off there unless a test
# asks (the CPU tests' kernels are made faster by a host-side sleep)
SAME_PROGRAM_ON_CPU = False
JUDGED = ("kept", "reverted", "screened", "incorrect", "crashed", "timeout", "baseline")


def default_margin(on_gpu: bool) -> float:
    """The screen's margin when the user names none."""
    return GPU_MARGIN if on_gpu else MARGIN


def key_of(source: str, dtype: str, shapes: Optional[list] = None) -> Optional[str]:
    """The candidate's key, or None for a file that does not parse (the bench will say why).
    `shapes`: the kernel's model shapes, as the search is told them, so both leave out the same
    tunables. Without them, matmul's persistent switches (read at LLaMA-7B's shapes, per its
    table) were left out of the key, and each ring move of one was "judged before" (H100, run 10)."""
    try:
        kf = parse_source(source)
    except Exception:
        return None
    return candidate_key(source, effective_fn(source, dtype, shapes or None)(kf.config))


def judged_keys(history: list) -> set[str]:
    """Keys of the kernel's candidates that got a verdict (any run)."""
    return {e.candidate_key for e in history if getattr(e, "candidate_key", None) and e.status in JUDGED}


@dataclass
class Plan:
    """Where a kernel's candidates are screened and what they are compared with."""

    shape: dict
    best_us: float  # the best version's time at `shape`


def plan(start_shapes: list[dict], best_shapes: list[dict]) -> Optional[Plan]:
    heavy = objective.heaviest(start_shapes)
    if heavy is None or not isinstance(heavy.get("shape"), dict):
        return None
    best = objective.time_at(best_shapes, heavy["shape"])
    return Plan(dict(heavy["shape"]), best) if best else None


def stopped(res: Any, p: Plan, margin: float = MARGIN) -> bool:
    """The screen stops a correct candidate slower than margin x the best at the heavy shape."""
    return res.correct and res.latency_us is not None and res.latency_us > margin * p.best_us


def recheck(res: Any, p: Plan, margin: float = MARGIN) -> bool:
    """A stopped candidate close enough to the margin to be screened a second time."""
    return stopped(res, p, margin) and res.latency_us < RECHECK * p.best_us


def rescreened(res: Any, p: Plan, margin: float, screen_again: Callable[[], Any]) -> Any:
    """`res`, or a second screen of the same candidate when `recheck` says so and it came out faster
    (both loops: one noisy screen near the margin must not stop a candidate as fast as the best)."""
    if not recheck(res, p, margin):
        return res
    again = screen_again()
    if again.correct and again.latency_us is not None and again.latency_us < res.latency_us:
        return again
    return res


def screened_fields(res: Any, p: Plan) -> dict[str, Any]:
    """The row of a candidate the screen stopped: its screen timing, not a model-level latency."""
    fields = res.experiment_fields()
    fields.update(status="screened", latency_us=None, latency_iqr_us=None, wall_us=None, details_json=None,
                  speedup_vs_eager=None, speedup_vs_compile=None, tflops=None, gbps=None, pct_peak=None,
                  correctness=None, error=f"screened out: {res.latency_us:.1f} us at "
                                          f"{'x'.join(str(v) for v in p.shape.values())} against the best's "
                                          f"{p.best_us:.1f} us ({res.latency_us / p.best_us:.2f}x)")
    return fields


def best_programs(best_shapes: list[dict], p: Plan, gpu: bool = True,
                  target_mode: str = "compile") -> Optional[list[dict]]:
    """The best version's program at every model shape, the screened shape first (what the screen
    compares a candidate's with, bench/programs.py), or None: when one of them is not named, and
    where a program is not all that is timed. It is what runs on the card, not the host's Python
    around it, which CPU wall-clock timings and the eager target mode (host time counted) measure
    too. Without it no screen is asked for programs, so none says "same program"."""
    if not (gpu or SAME_PROGRAM_ON_CPU) or target_mode == "eager":
        return None
    rows = [r for r in best_shapes if isinstance(r.get("shape"), dict)]
    if not rows or not all(r.get("program") for r in rows):
        return None
    heavy = objective.shape_key(p.shape)
    rows.sort(key=lambda r: objective.shape_key(r["shape"]) != heavy)
    return [{"shape": r["shape"], "program": r["program"]} for r in rows]


def same_program(res: Any, source: str, best_source: Callable[[], Optional[str]]) -> bool:
    """The candidate differs from the best only in its configuration, and at every model shape that
    configuration runs the best's very program (its screen was given best_programs and found them
    equal): a full judgement would time the best again. Only for the card's timings, checked here on
    the result itself as well: `gpu` in best_programs is the caller's belief about the run.
    `best_source` is read only then."""
    if not (res.extra or {}).get("same_program") or not (res.gpu_timing or SAME_PROGRAM_ON_CPU):
        return False
    if (best := best_source()) is None:
        return False
    try:
        return rest_of(source) == rest_of(best)
    except Exception:  # a file that does not parse is the judge's to report
        return False


def same_program_fields(res: Any, p: Plan) -> dict[str, Any]:
    """The row of a candidate left at its screen because it runs the best's program everywhere."""
    fields = res.experiment_fields()
    fields.update(status="screened", latency_us=None, latency_iqr_us=None, wall_us=None, details_json=None,
                  speedup_vs_eager=None, speedup_vs_compile=None, tflops=None, gbps=None, pct_peak=None,
                  correctness=None)
    n = len((res.extra or {}).get("programs") or [])
    fields["error"] = (f"{SAME_PROGRAM} at all {n} model shapes: not judged again "
                       f"({res.latency_us:.1f} us at the screen against the best's {p.best_us:.1f} us)"
                       if res.latency_us is not None else
                       f"{SAME_PROGRAM} at all {n} model shapes: not judged again")
    return fields


def left_at_screen(res: Any, p: Plan, margin: float, source: str,
                   best_source: Callable[[], Optional[str]]) -> Optional[dict[str, Any]]:
    """The row of a candidate that stays at its screen (slower than the margin, or the best's program
    at every model shape), or None when it goes on to the full judgement (or failed: the result says)."""
    if stopped(res, p, margin):
        return screened_fields(res, p)
    if res.correct and same_program(res, source, best_source):
        return same_program_fields(res, p)
    return None


def fill_library(res: Any, start_shapes: list[dict]) -> None:
    """Copy the run's library timings (eager, compile, eager's host time per shape) into a result
    the bench timed without them, and derive its totals and the too-good flag as the bench would."""
    rows = (res.extra or {}).get("per_shape") or []
    if not res.correct or not rows:
        return
    lib = {objective.shape_key(r.get("shape")): r for r in start_shapes}
    for r in rows:
        base = lib.get(objective.shape_key(r.get("shape")), {})
        for k in ("eager_us", "compile_us", "eager_wall_us"):
            if r.get(k) is None and base.get(k) is not None:
                r[k] = base[k]
    lat, eager, comp = objective.weighted_totals(rows)
    if res.eager_us is None and eager is not None and lat > 0:
        res.eager_us, res.speedup_vs_eager = eager, eager / lat
    if res.compile_us is None and comp is not None and lat > 0:
        res.compile_us, res.speedup_vs_compile = comp, comp / lat
    pct = res.pct_peak if roofline_binds(res.bound, res.dtype) else None
    res.flagged = res.flagged or too_good(lat, res.eager_us, res.compile_us, pct)
    res.extra["library_timings"] = "the run's starting point (timed once per kernel and shape)"
