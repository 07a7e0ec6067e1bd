"""KernelBench timing, on the GPU (CUDA events) or, without one, by CPU wall clock (labelled).

Every trial runs on the same input tensors refilled in place with the values of a new seed (outside
the timed region), so a ModelNew that caches by address or by contents never times a cache hit.
A few trials, chosen at random, keep a copy of their output taken the moment the calling stream
finished (before the device-wide synchronize); after the run the copies are compared with the
reference for their inputs and the outputs themselves must not have changed or share memory.
On the GPU the device is synchronized inside every trial: work that ends only after the current
stream's end event (side streams) is refused.
"""

from __future__ import annotations

import statistics
import time

import torch

from autokernel.bench.refill import Reservoir, Sampled, choose
from autokernel.kb.inputs import Inputs, flat, reference_outputs, tolerance

WARMUP = 3
REPS = 100
QUICK_REPS = 25
SIDE_STREAM_SLACK_US = 50.0


def kb_sampled(prob, init, device: str, model_seed: int, inputs: Inputs) -> Sampled:
    """Sampled timed outputs of ModelNew, keyed by input seed index, against the problem's Model."""

    def expected(i: int):
        exact = reference_outputs(prob, init, device, model_seed, inputs.made(i))
        floats = [t for t in flat(exact) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        return (exact, *tolerance(floats[0].dtype if floats else torch.float32))

    return Sampled(expected)


def time_gpu(fn, inputs: Inputs, reps: int, sampled: Sampled | None = None) -> dict:
    """KernelBench timing: WARMUP calls, then `reps` trials (the first discarded), each on inputs
    refilled in place after an L2 flush; CUDA events around the call on the current stream
    (`stream`), and a second end event after a device-wide synchronize (`device`)."""
    from autokernel.bench.timing import _flush_buffer

    flush = _flush_buffer("cuda")
    args = inputs.args
    for _ in range(WARMUP):
        fn(*args)
    torch.cuda.synchronize()
    stream, device = [], []
    chosen = choose(reps, skip_last=False) if sampled is not None else set()
    for i in range(reps):
        inputs.refill(1000 + i)
        flush.zero_()
        torch.cuda.synchronize()
        s, m, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        s.record()
        out = fn(*args)
        m.record()
        if i in chosen:  # copied where the stream ended, before the device-wide synchronize
            sampled.take(1000 + i, out)
        torch.cuda.synchronize()
        e.record()
        e.synchronize()
        stream.append(s.elapsed_time(m) * 1e3)
        device.append(s.elapsed_time(e) * 1e3)
        del out
    stream, device = stream[1:], device[1:]
    q = statistics.quantiles(stream, n=4) if len(stream) >= 4 else [min(stream), 0, max(stream)]
    return {"median_us": statistics.median(stream), "iqr_us": q[2] - q[0], "device_us": statistics.median(device),
            "reps": len(stream)}


def time_cpu(fn, inputs: Inputs, budget_s: float = 2.0, max_reps: int = 20, sampled: Sampled | None = None) -> dict:
    """Wall clock per call, each on inputs refilled in place (outside the clock)."""
    args = inputs.args
    fn(*args)
    samples = []
    kept = Reservoir() if sampled is not None else None  # random timed calls and the last
    end = time.perf_counter() + budget_s
    while len(samples) < 3 or (len(samples) < max_reps and time.perf_counter() < end):
        rep = len(samples)
        inputs.refill(1000 + rep)
        t = time.perf_counter()
        out = fn(*args)
        samples.append((time.perf_counter() - t) * 1e6)
        if kept is not None:
            kept.offer(1000 + rep, out)
        del out
    if kept is not None:
        kept.into(sampled)
    q = statistics.quantiles(samples, n=4)
    return {"median_us": statistics.median(samples), "iqr_us": q[2] - q[0], "reps": len(samples)}
