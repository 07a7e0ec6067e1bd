"""GPU timing: CUDA events around each call, L2 flushed before every repetition, warm-up, many
repetitions, median and IQR. The host is kept ahead of the GPU: each batch of repetitions is
queued behind a GPU-side sleep longer than the host needs to queue them, so the events time the
kernels and not the Python launch path (a 2048x4096 layer norm is ~15 us of GPU work, and a Triton
launch from Python can take longer than that; it is the same function for every contender). The
candidate, eager PyTorch and torch.compile are timed in the same process by the same function, so
their numbers are comparable. GPU only: on the CPU the bench reports no timings at all.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Callable

import torch

L2_FLUSH_BYTES = 256 << 20  # larger than any current L2 (H200: 60 MB)
MIN_REPS = 50
MIN_TIME_S = 0.5
MAX_REPS = 2000
WARMUP_MS = 25.0
# max-autotune spends minutes per shape in autotuning; "default" already calls cuBLAS for
# matmuls and fuses the rest. Override with AUTOKERNEL_COMPILE_MODE=max-autotune-no-cudagraphs.
COMPILE_MODE = os.environ.get("AUTOKERNEL_COMPILE_MODE", "default")

BATCH = 32  # repetitions queued behind one GPU sleep
HOST_MARGIN = 1.5  # sleep this many times the measured host time of queueing a batch
MAX_SLEEP_US = 20_000.0

_flush: dict[str, torch.Tensor] = {}
_compiled: dict[str, Callable] = {}
_baselines: dict[tuple, tuple[float | None, float | None]] = {}
_eager_walls: dict[tuple, float] = {}


def _flush_buffer(device: str) -> torch.Tensor:
    if device not in _flush:
        _flush[device] = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device)
    return _flush[device]


def _host_us_per_rep(fn: Callable, args: tuple, flush: torch.Tensor, start, end) -> float:
    """Host microseconds to queue one repetition (flush, events, call): queued, not waited for."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        flush.zero_()
        start.record()
        fn(*args)
        end.record()
    host_us = (time.perf_counter() - t0) / 3 * 1e6
    torch.cuda.synchronize()
    return host_us


def _cycles_per_us(device: str) -> float:
    khz = getattr(torch.cuda.get_device_properties(torch.device(device)), "clock_rate", 0) or 2_000_000
    return khz / 1e3


def time_call(fn: Callable, args: tuple, device: str = "cuda", *, min_reps: int = MIN_REPS,
              min_time_s: float = MIN_TIME_S, max_reps: int = MAX_REPS) -> dict[str, float]:
    """Median and IQR in microseconds of fn(*args), each repetition after an L2 flush."""
    flush = _flush_buffer(device)
    fn(*args)
    torch.cuda.synchronize()
    # Warm-up for WARMUP_MS and an estimate of one call to choose the repetition count.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    n = 0
    while True:
        fn(*args)
        n += 1
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end)
        if elapsed >= WARMUP_MS or n >= 1000:
            break
    est_ms = max(elapsed / n, 1e-3)
    reps = int(min(max_reps, max(min_reps, (min_time_s * 1e3) / est_ms)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    host_us = _host_us_per_rep(fn, args, flush, starts[0], ends[0])
    cycles_per_us = _cycles_per_us(device)
    for b in range(0, reps, BATCH):
        batch = range(b, min(reps, b + BATCH))
        torch.cuda._sleep(int(min(MAX_SLEEP_US, HOST_MARGIN * host_us * len(batch)) * cycles_per_us))
        for i in batch:
            flush.zero_()
            starts[i].record()
            fn(*args)
            ends[i].record()
    torch.cuda.synchronize()
    samples = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    q = statistics.quantiles(samples, n=4) if len(samples) >= 4 else [samples[0], samples[0], samples[-1]]
    return {"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "reps": reps,
            "min_us": samples[0]}


def wall_call(fn: Callable, args: tuple, min_time_s: float = 0.05, max_reps: int = 2000) -> float:
    """Microseconds per call when calls are issued back to back and the host paces them: what a model
    in eager mode sees of this op (max of the host's launch path and the GPU's time; L2 warm)."""
    fn(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    reps = int(min(max_reps, max(10, min_time_s / one)))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e6


def peak_vram_mb(fn: Callable, args: tuple) -> float:
    """Memory the call allocates beyond its inputs (peak), in MB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return max(peak, 0) / 2**20


def compiled_reference(spec) -> Callable:
    if spec.name not in _compiled:
        _compiled[spec.name] = torch.compile(spec.reference, mode=COMPILE_MODE, dynamic=False)
    return _compiled[spec.name]


def eager_wall(spec, shape: dict, dtype: torch.dtype, args: tuple) -> float:
    """wall_call of the spec's reference (eager PyTorch) at this shape, cached per worker process."""
    key = (spec.name, tuple(sorted(shape.items())), str(dtype))
    if key not in _eager_walls:
        _eager_walls[key] = wall_call(spec.reference, args)
    return _eager_walls[key]


def baseline_times(spec, shape: dict, dtype: torch.dtype, args: tuple, device: str) -> tuple[float | None, float | None]:
    """(eager_us, compile_us) for the spec's reference at this shape, cached per worker process."""
    key = (spec.name, tuple(sorted(shape.items())), str(dtype))
    if key not in _baselines:
        eager = time_call(spec.reference, args, device)["median_us"]
        try:
            comp = time_call(compiled_reference(spec), args, device)["median_us"]
        except Exception:  # an inductor failure must not sink the candidate's result
            comp = None
        _baselines[key] = (eager, comp)
    return _baselines[key]
