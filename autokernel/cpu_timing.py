"""CPU wall-clock timing for the loop on a machine without a GPU.

The bench reports no timings without a GPU (interpreter timings are not GPU timings). So that the
loop still works end to end on a CPU machine (tests, the CPU main job), a correct candidate is
timed here by wall clock under the Triton interpreter, in its own subprocess with the bench's
key-stripped environment. Such numbers only rank candidates against each other on this machine;
results carry gpu_timing=False and extra["timing"] says what they are.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from autokernel.errors import BenchError

CPU_TIMING_NOTE = "CPU wall clock under the Triton interpreter: ranks candidates on this machine, not GPU timings"


def child_main() -> int:
    """The timing subprocess: a request on stdin, the timings as JSON on stdout."""
    import statistics
    import sys

    req = json.loads(sys.stdin.read())
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from autokernel.bench.checks import make_inputs
    from autokernel.kernelfile import entry_point, import_kernel, parse_source
    from autokernel.kernels import get_spec
    from autokernel.kernels.spec import to_dtype

    spec = get_spec(req["kernel_type"])
    fn = entry_point(import_kernel(parse_source(req["source"])))
    shapes = req.get("shapes") or spec.small_shapes
    weights = req.get("weights") or [1] * len(shapes)
    dtype = to_dtype(req.get("dtype") or "float32")
    total = {"latency_us": 0.0, "latency_iqr_us": 0.0, "eager_us": 0.0, "per_shape": []}
    for shape, w in zip(shapes, weights):
        args = make_inputs(spec, shape, dtype, "cpu", 1234)
        row = {"shape": shape, "weight": w}
        for name, f in (("latency", fn), ("eager", spec.reference)):
            f(*args)  # warm-up
            samples, budget = [], time.perf_counter() + float(req.get("seconds_per_shape", 1.0))
            while len(samples) < 5 or (len(samples) < 50 and time.perf_counter() < budget):
                t = time.perf_counter()
                f(*args)
                samples.append((time.perf_counter() - t) * 1e6)
            q = statistics.quantiles(samples, n=4)
            row[f"{name}_us"] = statistics.median(samples)
            total[f"{name}_us"] += w * row[f"{name}_us"]
            if name == "latency":
                total["latency_iqr_us"] += w * (q[2] - q[0])
        total["per_shape"].append(row)
    sys.stdout.write(json.dumps(total))
    return 0


class CPUTimingFailed(BenchError):
    """The candidate failed in the CPU timing child (it exited, raised or hung there): a result of
    the candidate, recorded as its experiment's outcome, not a failure of the run."""

    def __init__(self, message: str, *, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


def cpu_wallclock(source: str, *, kernel_type: str, shapes=None, weights=None, dtype=None,
                  timeout_s: float = 300.0) -> dict[str, Any]:
    import subprocess
    import sys
    from pathlib import Path

    from autokernel.bench.isolation import clean_env, kill_group

    env = clean_env()
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TRITON_INTERPRET", "1")
    req = {"source": source, "kernel_type": kernel_type, "shapes": shapes, "weights": weights, "dtype": dtype}
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from autokernel.cpu_timing import child_main; "
                             "sys.exit(child_main())"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(json.dumps(req).encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise CPUTimingFailed(f"cpu-timing: exceeded its time limit ({timeout_s:.0f} s)", timed_out=True) from None
    except BaseException:  # Ctrl-C: the child is in its own session and would run on
        kill_group(proc)
        raise
    if proc.returncode != 0:
        from autokernel.bench.isolation import describe_exit

        raise CPUTimingFailed(f"cpu-timing: the timing process {describe_exit(proc.returncode)}: "
                              f"{err.decode(errors='replace')[-1500:]}")
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        raise CPUTimingFailed(f"cpu-timing: unreadable output {out[-200:]!r}") from None


class CPUTimedJudge:
    """Wraps a bench judge: a correct result without timings gets CPU wall-clock numbers."""

    def __init__(self, judge: Callable[..., Any]):
        self.judge = judge

    def __call__(self, source: str, **kw):
        res = self.judge(source=source, **{k: v for k, v in kw.items()})
        if res.correct and res.latency_us is None:
            from autokernel.bench.result import CRASHED, TIMEOUT

            try:
                t = cpu_wallclock(source, kernel_type=kw["kernel_type"], shapes=kw.get("shapes"),
                                  weights=kw.get("weights"), dtype=kw.get("dtype"),
                                  timeout_s=kw.get("timeout_s", 300.0))
            except CPUTimingFailed as exc:
                res.outcome, res.error = (TIMEOUT if exc.timed_out else CRASHED), str(exc)
                return res
            res.extra["per_shape"] = t.get("per_shape", [])
            res.latency_us, res.latency_iqr_us, res.eager_us = t["latency_us"], t["latency_iqr_us"], t["eager_us"]
            # eager_us is kept for the record; a speed-up of interpreted Triton over native
            # PyTorch means nothing, so none is claimed (the orchestrator then uses vs-baseline)
            res.speedup_vs_eager = None
            res.gpu_timing = False
            res.extra["timing"] = CPU_TIMING_NOTE
        return res
