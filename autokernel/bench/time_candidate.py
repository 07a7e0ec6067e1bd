"""The bench's timing stage (GPU only): the candidate at each timed shape, the eager and
torch.compile baselines, the roofline, and the checks that keep timing honest.

What is timed is also checked: the inputs get new values in place before every repetition
(`Refill`), a few repetitions chosen at random keep their output, copied the moment the calling
stream finished it, and after the run those copies must match the reference for their inputs, the
outputs must not have changed or share memory (`Sampled`); work still running on other streams
after the last repetition, a library share above the limit in a call at the timed shape, or a
change to anything the judge trusts (torch.cuda.Event, ...) rejects the candidate as a cheat.
"""

from __future__ import annotations

import time

from autokernel.bench import ceilings as ceil_mod
from autokernel.bench import timing
from autokernel.bench.baselines import by_shape
from autokernel.bench.judge import arm, environment
from autokernel.bench.result import roofline_binds, too_good
from autokernel.bench.launches import WATCHED, Launches, cheat_reason, library_reason, record_gpu, watched_reason
from autokernel.bench.share import UNSEEN
from autokernel.bench.across_calls import Refill, Sampled, spec_expected
from autokernel.kernels.spec import to_dtype
from autokernel.objective import shape_key

TAIL_SLACK_US = 200.0  # host synchronize and one event record after the last repetition


def time_all(res, spec, ctx, shapes, weights, dt: str, req: dict, deadline: float) -> str | None:
    """Time the candidate against its deadline and fill `res`; returns why it is a cheat, or None.
    The baselines and ceilings are the trusted process's (req["trusted"], bench/baselines.py): this
    process runs the candidate, so nothing timed here is a baseline, and the parent puts the reported
    baselines and speed-ups into the result from the numbers it holds (`settle`). Here the eager time
    only decides whether a timing is too good to be true."""
    fn, device = ctx.fn, ctx.device
    arm(max(1.0, deadline - time.monotonic() - 0.5))
    supplied = by_shape(req.get("trusted"), environment()["key"], dt)[0] if req.get("baselines", True) else {}
    ceilings = req.get("ceilings") or (req.get("trusted") or {}).get("ceilings") or {}
    dtype = to_dtype(dt)
    per_shape = []
    lat = wall_total = iqr = 0.0
    flops = nbytes = 0.0
    vram = 0.0
    for shape, w in zip(shapes, weights):
        refill = Refill(spec, shape, dtype, device)
        args = refill.args
        lib = supplied.get(shape_key(shape), {})
        floor = (ceil_mod.floor_us(ceilings, spec.compute_bound, dt, spec.flops(shape, dtype), spec.bytes(shape, dtype))
                 if roofline_binds("compute" if spec.compute_bound else "memory", dt) else None)
        t, why, flagged = timed_at_shape(ctx, spec, refill, device, eager_us=lib.get("eager_us"),
                                         compile_us=lib.get("compile_us"), floor_us=floor)
        if why:
            return f"{spec.shape_label(shape)}: {why}"
        res.flagged = res.flagged or flagged
        vram = max(vram, timing.peak_vram_mb(fn, args))
        wall = timing.wall_call(fn, args, refill=refill)
        ctx.verify()
        per_shape.append({"shape": shape, "dtype": dt, "weight": w, "latency_us": t["median_us"],
                          "iqr_us": t["iqr_us"], "reps": t["reps"], "wall_us": wall, "tail_us": t["tail_us"]})
        wall_total += w * wall
        lat += w * t["median_us"]
        iqr += w * t["iqr_us"]
        flops += w * spec.flops(shape, dtype)
        nbytes += w * spec.bytes(shape, dtype)
        del args, refill
    res.gpu_timing = True
    res.latency_us, res.latency_iqr_us, res.wall_us = lat, iqr, wall_total
    res.tflops = flops / (lat * 1e-6) / 1e12 if lat > 0 else None
    res.gbps = nbytes / (lat * 1e-6) / 1e9 if lat > 0 else None
    res.peak_vram_mb = vram
    res.pct_peak, res.bound = ceil_mod.pct_of_ceiling(ceilings, spec.compute_bound, dt, res.tflops, res.gbps)
    res.extra.update(per_shape=per_shape, compile_mode=timing.COMPILE_MODE,
                     ceilings={k: ceilings.get(k) for k in ("copy_gbps", "matmul_tflops_fp32", "matmul_tflops_fp16",
                                                            "matmul_tflops_bf16")})
    return None


def timed_at_shape(ctx, spec, refill: Refill, device: str, eager_us: float | None = None,
                   compile_us: float | None = None, floor_us: float | None = None,
                   **more) -> tuple[dict, str | None, bool]:
    """(timing, why it is a cheat or None, flagged): the judge's whole timing at refill's shape, as
    the full judgement and the pair's checked screen both take it: a checked timing, again when it
    left a tail, the tail check, again with more repetitions when it is too good to be true against
    the library's times and the roofline's floor at this shape (flagged if it still is: see
    bench.result.too_good), then the library share of a profiled call."""
    fn = ctx.fn
    t, why = timed_checked(ctx, fn, spec, refill, device, **more)
    if not why and tail_reason(t):
        # A tail is hidden work, or the host stalled between the last end event and the idle one
        # (the H200's host judged an honest rmsnorm "still running 271 us"). Timed again, hidden
        # work shows again and a stall does not; the second timing is the one kept, so a
        # candidate that hides work only in the first gains nothing.
        t, why = timed_checked(ctx, fn, spec, refill, device, **more)
    why = why or tail_reason(t)
    if why:
        return t, why, False
    flagged = False
    if too_good(t["median_us"], eager_us, compile_us, floor_us=floor_us):
        # Time again (more repetitions) before reporting; still too good -> flagged for review,
        # never trusted silently.
        t, why = timed_checked(ctx, fn, spec, refill, device, **{**more, "min_reps": max(200, more.get("min_reps", 0))})
        why = why or tail_reason(t)
        if why:
            return t, why, False
        flagged = too_good(t["median_us"], eager_us, compile_us, floor_us=floor_us)
    why = library_at(ctx, spec, fn, refill, t.get("host_rep_us") or 0.0, t["median_us"])
    return t, why, flagged


def timed_checked(ctx, fn, spec, refill: Refill, device: str, **more) -> tuple[dict, str | None]:
    """One GPU timing of the candidate at refill's shape, a sample of its timed outputs checked
    against the reference (their verdict, or None), the judge's integrity checked after it. A call
    that leaves a mode, a stream or a thread behind raises between_calls.LeftBehind (the judge's
    verdict: a cheat, and a new worker)."""
    sampled = Sampled(spec_expected(spec, refill))
    t = timing.time_call(fn, refill.args, device, refill=refill, on_sample=sampled.take, verify=ctx.verify, **more)
    ctx.verify()
    return t, sampled.verdict()


def tail_reason(t: dict) -> str | None:
    if t["tail_us"] > TAIL_SLACK_US + 0.5 * t["median_us"]:
        probe = t.get("idle_probe_us")
        seen = f"; the same wait with nothing running: {probe:.0f} us" if probe is not None else ""
        return (f"work was still running {t['tail_us']:.0f} us after its last timed call ended (median call "
                f"{t['median_us']:.1f} us{seen}): work on another stream that the call never waited for")
    return None


LEAD_US = 2000.0  # the least lead sleep ahead of the profiled call at a timed shape
LONG_LEAD_US = 100_000.0  # the second look, when the first saw GPU time unaccounted for


WATCHED_SLACK = 1.5  # a profiled call's GPU work may take this many times the timed median ...
WATCHED_SLACK_US = 30.0  # ... plus this (the profiler's own cost per kernel, jitter)


def library_at(ctx, spec, fn, refill: Refill, host_us: float = 0.0, median_us: float | None = None) -> str | None:
    """The library share of one profiled call at the timed shape (a candidate may switch to the
    library only where it is timed), warm: behind a lead sleep of several times the host's time per
    call, so its kernels run back to back and GPU time no kernel accounts for is hidden work. When
    the share is over the limit with such time in it, the call is profiled again behind a far
    longer sleep: a host slower than the first lead (a collection, a busy machine) leaves the GPU
    idle once, hidden work takes its time every time; the second look decides (so too for the
    check below, whose work a stalled host would also lengthen).

    A candidate can also tell a profiled call from a timed one (the profiler is on, and says so)
    and do its own work only while watched. So the profiled call's GPU work must be about what the
    timed calls took (`median_us`): its inputs were just written (warm in L2), the profiler adds a
    little per kernel; a profiled call far slower than the timed median is not the call that was
    timed."""
    reason = None
    for lead in (max(LEAD_US, 4.0 * host_us), LONG_LEAD_US):
        launches = Launches()
        refill(-2)
        # the integrity check runs after the closing markers, before the profiler's record is read
        with record_gpu(launches, lead_us=lead, after=ctx.verify) as ended:
            fn(*refill.args)
            ended()
        reason = cheat_reason(launches, spec.library_kernel_patterns, True) or \
            library_reason(launches, spec.library_kernel_patterns, True)
        if reason is None and median_us is not None and launches.gpu_sessions:
            # the timed median is GPU time (timing sleeps for the host's deficit): the floor applies
            reason = watched_reason(launches.gpu_sessions[-1], median_us, WATCHED_SLACK, WATCHED_SLACK_US,
                                    floor_us=WATCHED_SLACK_US)
        if reason is None or (UNSEEN not in reason and WATCHED not in reason):
            return reason
    return reason
