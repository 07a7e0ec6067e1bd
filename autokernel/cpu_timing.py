"""Timings on a machine without a GPU, made as steady as a CPU allows, and labelled as such.

A CPU forward pass measured with torch's default thread pool swings by two orders of magnitude on
a busy machine (llama-tiny's eager forward: 106, 66, 23 and 0.98 ms in successive runs with two
threads, 0.93 ms with one): the pool's threads wait on each other and on every other process.
So every CPU timing here runs with torch (and, in a child process, the BLAS libraries) pinned to
CPU_THREADS thread(s), repeats its measurement until it has enough samples or has spent its time
budget, and takes the median. The numbers still only rank candidates against each other on this
machine; they say nothing about GPU speed, and every place that shows them says so.

The loop's candidate timing: the bench reports no timings without a GPU (interpreter timings are
not GPU timings). So that the loop still works end to end on a CPU machine (tests, the CPU main
job), a correct candidate is timed here by wall clock under the Triton interpreter, in its own
subprocess with the bench's key-stripped environment, in the bench's sandbox (bench/sandbox.py), on
inputs given new values in place before every call (bench/across_calls.py: a result cached by address
or contents never times a hit), and some of its timed outputs (random ones and the last) are
checked against the reference;
results carry gpu_timing=False and extra["timing"] says what they are.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from autokernel.errors import BenchError

CPU_THREADS = 1
CPU_TIMING_NOTE = (f"CPU timings ({CPU_THREADS} thread, median of repeated runs) under the Triton interpreter: "
                   "they rank candidates on this machine, they are not GPU timings")
CPU_LABEL = f"CPU timings, {CPU_THREADS} thread"
# a child process pins the native thread pools through the environment, before they start
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


@contextmanager
def pinned_threads(n: int = CPU_THREADS) -> Iterator[None]:
    """torch's intra-op pool at `n` threads for the block (restored after)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def repeat(fn: Callable[[], Any], *, min_runs: int, max_runs: int = 50, budget_s: float = 1.0,
           clock: Callable[[], float] = time.perf_counter, before: Callable[[int], Any] | None = None,
           after: Callable[[int, Any], Any] | None = None) -> list[float]:
    """Seconds of each call of `fn`: at least `min_runs`, then more while under `budget_s`
    (a cheap call is repeated many times, an expensive one only `min_runs` times). `before(i)` and
    `after(i, result)` run around call i, outside its clock."""
    samples: list[float] = []
    deadline = clock() + budget_s
    while len(samples) < min_runs or (len(samples) < max_runs and clock() < deadline):
        if before is not None:
            before(len(samples))
        t0 = clock()
        out = fn()
        samples.append(clock() - t0)
        if after is not None:
            after(len(samples) - 1, out)
    return samples


def cpu_time_child() -> int:
    """The child of cpu_wallclock: times a kernel file and its reference on the given shapes."""
    import sys

    from autokernel.bench.introspection import refused, start_judgement

    req = json.loads(sys.stdin.read())
    os.environ.setdefault("TRITON_INTERPRET", "1")
    start_judgement()  # no frame, gc walk or ctypes for the candidate's code (bench/introspection.py)
    try:
        out = _time_here(req)
    except Exception:
        if not refused():
            raise
        out = {}
    looked = refused()  # caught or not, a look into this process's internals is the verdict
    sys.stdout.write(json.dumps({"cheat": f"cpu-timing: {looked}"} if looked else out))
    return 0


def _time_here(req: dict) -> dict:
    from autokernel.bench.across_calls import Refill, Reservoir, Sampled, spec_expected
    from autokernel.kernelfile import entry_point, import_kernel, parse_source
    from autokernel.kernels import get_spec
    from autokernel.kernels.spec import to_dtype

    spec = get_spec(req["kernel_type"])
    fn = entry_point(import_kernel(parse_source(req["source"])))
    shapes = req.get("shapes") or spec.small_shapes
    weights = req.get("weights") or [1] * len(shapes)
    dtype = to_dtype(req.get("dtype") or "float32")
    total = {"latency_us": 0.0, "latency_iqr_us": 0.0, "eager_us": 0.0, "per_shape": []}
    with pinned_threads():
        for shape, w in zip(shapes, weights):
            refill = Refill(spec, shape, dtype, "cpu")  # new values in the same tensors before every call
            args = refill.args
            row = {"shape": shape, "weight": w}
            for name, f in (("latency", fn), ("eager", spec.reference)):
                f(*args)  # warm-up
                kept = Reservoir() if name == "latency" else None  # timed outputs to check: random ones and the last

                samples = [s * 1e6 for s in repeat(lambda: f(*args), min_runs=5, before=refill,
                                                   after=kept.offer if kept is not None else None,
                                                   budget_s=float(req.get("seconds_per_shape", 1.0)))]
                why = kept.into(Sampled(spec_expected(spec, refill))).verdict() if kept is not None else None
                if why:  # what it returned while timed was wrong: a cheat, reported as such
                    return {"cheat": f"cpu-timing: {spec.shape_label(shape)}: {why}"}
                q = statistics.quantiles(samples, n=4)
                row[f"{name}_us"] = statistics.median(samples)
                total[f"{name}_us"] += w * row[f"{name}_us"]
                if name == "latency":
                    total["latency_iqr_us"] += w * (q[2] - q[0])
            total["per_shape"].append(row)
    return total


class CPUTimingFailed(BenchError):
    """The candidate failed in the CPU timing child (it exited, raised or hung there): a result of
    the candidate, recorded as its experiment's outcome, not a failure of the run."""

    def __init__(self, message: str, *, timed_out: bool = False, cheat: bool = False):
        super().__init__(message)
        self.timed_out = timed_out
        self.cheat = cheat  # what it returned while timed was wrong


def cpu_wallclock(source: str, *, kernel_type: str, shapes=None, weights=None, dtype=None,
                  timeout_s: float = 300.0) -> dict[str, Any]:
    import subprocess
    import sys

    from autokernel.bench.isolation import clean_env, describe_exit, kill_group
    from autokernel.bench.sandbox import sandboxed

    env = clean_env()
    env.setdefault("TRITON_INTERPRET", "1")
    env.update({name: str(CPU_THREADS) for name in THREAD_ENV})
    req = {"source": source, "kernel_type": kernel_type, "shapes": shapes, "weights": weights, "dtype": dtype}
    argv, env, _iso = sandboxed([sys.executable, "-c", "import sys; from autokernel.cpu_timing import cpu_time_child; "
                                 "sys.exit(cpu_time_child())"], env)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(json.dumps(req).encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise CPUTimingFailed(f"cpu-timing: exceeded its time limit ({timeout_s:.0f} s)", timed_out=True) from None
    except BaseException:  # Ctrl-C: the child is in its own session and would run on
        kill_group(proc)
        raise
    if proc.returncode != 0:
        raise CPUTimingFailed(f"cpu-timing: the timing process {describe_exit(proc.returncode)}: "
                              f"{err.decode(errors='replace')[-1500:]}")
    try:
        got = json.loads(out)
    except json.JSONDecodeError:
        raise CPUTimingFailed(f"cpu-timing: unreadable output {out[-200:]!r}") from None
    if "cheat" in got:
        raise CPUTimingFailed(got["cheat"], cheat=True)
    return got


class CPUTimedJudge:
    """Wraps a bench judge: a correct result without timings gets CPU wall-clock numbers."""

    def __init__(self, judge: Callable[..., Any]):
        self.judge = judge

    def __call__(self, source: str, **kw):
        res = self.judge(source=source, **{k: v for k, v in kw.items()})
        if res.correct and res.latency_us is None:
            from autokernel.bench.result import CHEAT, CRASHED, TIMEOUT

            try:
                t = cpu_wallclock(source, kernel_type=kw["kernel_type"], shapes=kw.get("shapes"),
                                  weights=kw.get("weights"), dtype=kw.get("dtype"),
                                  timeout_s=kw.get("timeout_s", 300.0))
            except CPUTimingFailed as exc:  # the candidate's own failure, recorded as its result
                res.outcome = CHEAT if exc.cheat else TIMEOUT if exc.timed_out else CRASHED
                res.error = str(exc)
                return res
            res.extra["per_shape"] = t.get("per_shape", [])
            res.latency_us, res.latency_iqr_us, res.eager_us = t["latency_us"], t["latency_iqr_us"], t["eager_us"]
            # eager_us is kept for the record; a speed-up of interpreted Triton over native
            # PyTorch means nothing, so none is claimed (the orchestrator then uses vs-baseline)
            res.speedup_vs_eager = None
            res.gpu_timing = False
            res.extra["timing"] = CPU_TIMING_NOTE
        return res
