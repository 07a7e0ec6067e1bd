"""The loop's objective: what verify would gain (DESIGN.md 5 and 7). No torch here.

A kernel is worth what the model saves with it. At each of its model shapes s (w_s calls per
forward) the model without the kernel runs the library's op: under torch.compile (and CUDA graphs)
the compiled op's GPU time, in eager mode the eager op's max(GPU time, host wall time). With the
kernel, per-shape dispatch (autokernel.dispatch) uses it only where it is faster, so

    realized_us = sum_s w_s * max(0, library_s - ours_s)            (per forward)

where ours_s is the best candidate's time seen the same way (GPU time under compile, max(GPU, host
wall time) in eager mode). A kernel behind the library everywhere has realized_us = 0, whatever its
share. As a fraction of the model's time: share * realized_us / op_us, op_us = sum_s w_s * eager_s
(the share was measured in eager mode).

Where no library timing exists (a CPU run: interpreted Triton against native PyTorch says nothing),
the library is replaced by the kernel's own starting point, which is what the Amdahl prediction
uses there too (autokernel.amdahl.kernel_speedup).

The value of one more experiment on a kernel, in model-time fraction per GPU-second:

    value = p * (gain(best * (1 - r)) - gain(best)) / cost_s

p: the learned probability that the next experiment improves the kernel (a Beta(1, 1) prior updated
by its recent outcomes, older ones decayed); r: the learned relative improvement of one keep (its
keeps' mean, shrunk towards a prior set by its distance to the roofline); cost_s: the median
duration of its recent experiments (screened candidates are cheap, so a kernel whose candidates
mostly fail the screen is cheap to explore). A kernel behind the library gets a one-step value of
0; when its own history (at least MIN_TREND keeps this run) says it crosses the library within
HORIZON experiments, it gets an investment value: the gain after the k keeps needed, over the
experiments they take (k / p), halved for the risk. A trend needs experiments, so a kernel whose
prior (one observation of the prior step, p 0.5) crosses within HORIZON experiments gets the same
value from its prior for its first EXPLORE_ATTEMPTS experiments of the run (exploring); failures
lower p, which ends the exploration early. Four experiments cost seconds of a loop of minutes, while
a kernel never tried can never cross: LLaMA-7B's rotary (0.89x torch.compile, H100) went untried
for 10 minutes, and its attention (0.77x cuDNN at 40% of its roofline) in two runs of 7 and 16
minutes, under stricter rules (within 15% of the library, then crossing within 4 experiments: the
attention's prior crossed in 6).

The prior step has a floor, PRIOR_MIN_STEP: a GEMM-class kernel's "roofline" is a measured cuBLAS
matmul (bench/ceilings.py), which a kernel can pass, so 98% of it is not the end of its gains. On
LLaMA-7B (H100 runs 4-6) keeps at 95-98% of that ceiling were 1.4-4.1% each;
without the floor such a kernel's prior step was 0.4% and its value next to nothing (H100 run 5:
matmul, at 1.01x the library, got no experiment in 7 minutes).

p's memory: outcomes decay by DECAY per experiment over the last WINDOW, so a kernel that stopped
improving is believed quickly; but decayed outcomes alone have a floor of about
1 / (2 + 1 / (1 - DECAY)), whatever the depth of the drought. With 0.85 over 10 that floor was 14%,
and a kernel 130 failures deep (H100 run 5's fused_mlp after its one keep) still outbid every kernel
near or behind the library for the rest of the run; with 0.93 over 30 it was 7%, and H100 run 11's
fused_mlp took 297 experiments in a row (none kept, 1 s each as the screen turned them away) while
matmul and rmsnorm, with keeps in 1 of 27 and 2 of 15, waited. So p is also at most the kernel's
rate over the whole run, (1 + keeps) / (2 + experiments): a long run's record is not forgotten, and
gains get rarer as a kernel improves, so the recent rate is an upper bound more often than a lower.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

MODES = ("compile", "eager")
DECAY = 0.93  # weight of an outcome one experiment older
WINDOW = 30  # outcomes p remembers (floor about 7% after a stretch of failures)
PRIOR_STEP = 0.1  # a keep's relative improvement before any keep is seen (scaled by roofline headroom)
PRIOR_MIN_STEP = 0.02  # ... never less (a measured library ceiling is no roofline: see above)
MAX_STEP = 0.5
MIN_TREND = 2  # keeps of its own before a kernel behind the library may be invested in
HORIZON = 12  # experiments within which the trend must cross the library
INVEST_RISK = 0.5
EXPLORE_ATTEMPTS = 4  # a kernel behind the library whose prior crosses within HORIZON: its first experiments
DEFAULT_COST_S = 10.0


@dataclass
class ShapeTime:
    shape: str  # canonical text of the shape dict
    weight: float  # calls per forward
    ref_us: float  # the library's time in the target mode (or the kernel's start on a CPU)
    eager_us: float  # what the shape costs the model in eager mode (normalises the share)
    ours_us: float  # the best candidate's time in the target mode


def shape_key(shape: Any) -> str:
    return json.dumps(shape, sort_keys=True) if isinstance(shape, dict) else str(shape)


def weighted_totals(rows: Iterable[dict]) -> tuple[float, Optional[float], Optional[float]]:
    """A result's per-shape rows summed by their weights: (latency, eager, torch.compile) in us, the
    last two None where a row has no time for them."""
    lat = eager = comp = 0.0
    have_eager = have_comp = True
    for r in rows:
        w = float(r.get("weight") or 1.0)
        lat += w * r["latency_us"]
        have_eager = have_eager and bool(r.get("eager_us"))
        have_comp = have_comp and bool(r.get("compile_us"))
        eager += w * (r.get("eager_us") or 0.0)
        comp += w * (r.get("compile_us") or 0.0)
    return lat, (eager if have_eager else None), (comp if have_comp else None)


def per_shape(details_json: Optional[str]) -> list[dict]:
    try:
        rows = json.loads(details_json or "[]")
    except (TypeError, ValueError):
        return []
    return [r for r in rows if isinstance(r, dict) and r.get("latency_us")] if isinstance(rows, list) else []


def library_us(row: dict, mode: str) -> Optional[float]:
    """The library op's time at one shape as the model would see it in `mode`."""
    eager = row.get("eager_us")
    if mode == "compile":
        return row.get("compile_us") or eager
    return max(eager, row.get("eager_wall_us") or 0.0) if eager else None


def kernel_us(row: dict, mode: str) -> Optional[float]:
    """A candidate's time at one shape as the model would see it: GPU time under compile,
    max(GPU time, host wall time per call) in eager mode."""
    lat = row.get("latency_us")
    if not lat:
        return None
    return lat if mode == "compile" else max(lat, row.get("wall_us") or 0.0)


def shape_times(start: Sequence[dict], best: Sequence[dict], mode: str, library: bool) -> list[ShapeTime]:
    """Per shape: the library's time (from the run's start row, which timed eager and compile once
    per shape; `library` False: the start's own time instead) and the best's, both in `mode`."""
    ours = {shape_key(r.get("shape")): r for r in best}
    out = []
    for r in start:
        key = shape_key(r.get("shape"))
        b = ours.get(key)
        ref = library_us(r, mode) if library else kernel_us(r, mode)
        mine = kernel_us(b, mode) if b is not None else None
        if ref and mine:
            eager = (library_us(r, "eager") if library else None) or ref
            out.append(ShapeTime(key, float(r.get("weight") or 1.0), float(ref), float(eager), float(mine)))
    return out


def gain_us(times: Iterable[ShapeTime], scale: float = 1.0) -> float:
    """What the model saves per forward with the kernel dispatched per shape, its times x scale."""
    return sum(t.weight * max(0.0, t.ref_us - scale * t.ours_us) for t in times)


def op_us(times: Iterable[ShapeTime]) -> float:
    return sum(t.weight * t.eager_us for t in times)


def vs_library(times: Sequence[ShapeTime]) -> Optional[float]:
    """The library's time over the best's at the model's shapes (weighted; < 1: behind)."""
    ours = sum(t.weight * t.ours_us for t in times)
    return sum(t.weight * t.ref_us for t in times) / ours if ours > 0 else None


def success_probability(outcomes: Sequence[bool], decay: float = DECAY, *, keeps: Optional[int] = None,
                        attempts: Optional[int] = None) -> float:
    """P(next experiment improves the kernel): Beta(1, 1) updated by the recent outcomes (oldest
    first), each weighted decay^age so that a kernel that stopped improving is believed quickly; and,
    given the whole run's `keeps` of `attempts`, never more than their Beta(1, 1) rate (see the
    module's note on p's memory)."""
    wins = trials = 0.0
    for age, ok in enumerate(reversed(outcomes)):
        w = decay ** age
        trials += w
        wins += w * bool(ok)
    p = (1.0 + wins) / (2.0 + trials)
    if attempts is not None:
        p = min(p, (1.0 + (keeps or 0)) / (2.0 + attempts))
    return p


def improvement_step(steps: Sequence[float], headroom: float) -> float:
    """A keep's expected relative improvement: the kernel's keeps (1 - new/old each) averaged with
    one prior observation of PRIOR_STEP x 2 x headroom (0.1 half-way to the roofline), at least
    PRIOR_MIN_STEP."""
    prior = max(PRIOR_MIN_STEP, PRIOR_STEP * 2.0 * max(0.0, min(1.0, headroom)))
    return max(0.0, min(MAX_STEP, (prior + sum(steps)) / (1.0 + len(steps))))


def cost_s(durations: Sequence[float], fallback: Optional[float]) -> float:
    recent = [d for d in durations[-10:] if d and d > 0]
    if recent:
        return max(0.05, statistics.median(recent))
    return max(0.05, fallback or DEFAULT_COST_S)


@dataclass
class Value:
    """One kernel's worth: realized (model fraction now), the one-step expectation, and the choice."""

    realized: float = 0.0  # fraction of the model's time the kernel saves now
    vs_library: Optional[float] = None
    p: float = 0.5
    step: float = PRIOR_STEP
    cost_s: float = DEFAULT_COST_S
    expected: float = 0.0  # expected added fraction from one more experiment
    value: float = 0.0  # expected fraction per GPU-second (the investment value for a kernel behind)
    invest: bool = False
    explore: bool = False  # invest is from the prior: too few experiments for a trend of its own
    crosses_in: Optional[float] = None  # experiments the trend needs to cross the library


def kernel_value(times: Sequence[ShapeTime], share: float, p: float, step: float, cost: float,
                 keeps: int, attempts: int = 0) -> Value:
    v = Value(p=p, step=step, cost_s=cost, vs_library=vs_library(times))
    op = op_us(times)
    if not times or op <= 0:
        return v
    frac = share / op  # model-time fraction per microsecond saved per forward
    now = gain_us(times)
    v.realized = frac * now
    v.expected = p * frac * (gain_us(times, 1.0 - step) - now)
    v.value = v.expected / cost
    if v.expected > 0 or step <= 0 or p <= 0:
        return v
    # behind the library at every shape: how many keeps until the closest shape crosses?
    need = min(math.log(t.ours_us / t.ref_us) for t in times) / -math.log(1.0 - step)
    k = math.floor(need) + 1
    v.crosses_in = k / p
    trend = keeps >= MIN_TREND
    explore = not trend and attempts < EXPLORE_ATTEMPTS and v.vs_library is not None
    if (trend or explore) and v.crosses_in <= HORIZON:
        v.invest, v.explore = True, explore
        v.value = INVEST_RISK * frac * gain_us(times, (1.0 - step) ** k) / (cost * v.crosses_in)
    return v


def model_speedup_of(realized: Iterable[float]) -> float:
    """The model's predicted speed-up from the kernels' realized fractions (Amdahl)."""
    saved = min(0.999999, sum(max(0.0, f) for f in realized))
    return 1.0 / (1.0 - saved)


def heaviest(rows: Sequence[dict]) -> Optional[dict]:
    """The per-shape row where the model spends the most time in the op (calls x time): the shape a
    candidate is screened at and the search scores it at."""
    timed = [r for r in rows if r.get("latency_us")]
    if not timed:
        return None
    return max(timed, key=lambda r: (float(r.get("weight") or 1.0) * float(r.get("eager_us") or r["latency_us"]),
                                     shape_key(r.get("shape"))))


def time_at(rows: Sequence[dict], shape: Any) -> Optional[float]:
    """The GPU (or CPU) time a per-shape list holds for one shape."""
    key = shape_key(shape)
    return next((float(r["latency_us"]) for r in rows if shape_key(r.get("shape")) == key and r.get("latency_us")),
                None)
