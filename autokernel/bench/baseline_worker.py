"""The bench's trusted timing child: `python -m autokernel.bench.baseline_worker`, the same line
protocol as the judge children (bench/worker.serve). It runs only the kernel specs' own reference
functions, never a candidate, so its caches (the compiled references, the baselines, the ceilings)
are out of every candidate's reach; bench/baselines.py starts it outside the sandbox and hands its
numbers to the judge with each request.

Why a process of its own: the judge's child imports candidates, and a candidate can reach any
module's lower-case state there through sys.modules without an audited event: it could put a slow
function in the compiled-reference cache, or larger numbers in the baseline cache, and be judged
faster than torch.compile. Integrity snapshots cover names and code, not the contents of caches.

One request, "baselines": the request's kernel type, dtype and shapes (or the judge's defaults for
this machine, resolved here exactly as judge_request resolves them) ->
{"device", "device_key", "dtype", "compile_mode", "baselines": [{"shape", "eager_us", "compile_us",
"eager_wall_us", "error"?}...], "ceilings": {...}}. Eager and torch.compile of the reference are
timed by bench/timing.py's own functions (CUDA events after warm-up, L2 flushed, median), both in
the same run, each shape once per process. Without a GPU the reply has no baselines: the bench
does not time on the CPU.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time

CPU_REPLY = "none: no GPU here; the bench times only on a GPU"


def measure(req: dict, send) -> dict:
    from autokernel.bench import judge as bj
    from autokernel.bench import timing
    from autokernel.bench.ceilings import ceilings_here
    from autokernel.bench.checks import make_inputs
    from autokernel.kernels.spec import to_dtype

    try:
        spec, cuda, device = bj.request_target(req)
    except KeyError as exc:
        return {"bench_error": str(exc)}
    env = bj.environment()
    dt = bj.request_dtype(req, cuda)
    shapes = req.get("shapes") or (spec.default_shapes if cuda else spec.small_shapes)
    shapes = [spec.canonical_shape(s) for s in shapes]
    reply = {"device": env["name"], "device_key": env["key"], "dtype": dt, "compile_mode": timing.COMPILE_MODE,
             "baselines": [], "ceilings": None}
    if not cuda:
        reply["timing"] = CPU_REPLY
        return reply
    old = signal.signal(signal.SIGALRM, bj.on_alarm)
    dtype = to_dtype(dt)
    try:
        for shape in shapes:
            entry = {"shape": shape, "eager_us": None, "compile_us": None, "eager_wall_us": None}
            reply["baselines"].append(entry)
            try:
                with _own_clock(send):
                    args = make_inputs(spec, shape, dtype, device, seed=1234)
                    entry["eager_us"], entry["compile_us"] = timing.baseline_times(spec, shape, dtype, args, device)
                    entry["eager_wall_us"] = timing.eager_wall(spec, shape, dtype, args)
                    del args
            except bj.StageTimeout:
                entry["error"] = f"baselines exceeded {bj.BASELINE_S:.0f} s"
            except Exception as exc:  # noqa: BLE001 - the reference failed at this shape: no numbers for it
                root = bj.root_cause(exc)
                entry["error"] = f"{type(root).__name__}: {root}"[:300]
                if bj.classify(exc)[1]:  # a broken CUDA context: the parent starts a fresh child
                    reply["restart"] = True
                    return reply
        if req.get("ceilings", True):
            with _own_clock(send):
                reply["ceilings"] = ceilings_here()
    finally:
        signal.signal(signal.SIGALRM, old)
    return reply


@contextlib.contextmanager
def _own_clock(send):
    """BASELINE_S of the stage alarm for the work inside, announced to the parent first (its limit
    moves by it) and what was not used given back after."""
    from autokernel.bench import judge as bj

    send({"extend_s": bj.BASELINE_S})
    t0 = time.monotonic()
    bj.arm(bj.BASELINE_S)
    try:
        yield
    finally:
        bj.disarm()
        send({"extend_s": (time.monotonic() - t0) - bj.BASELINE_S})


def main() -> int:
    from autokernel.bench.worker import serve

    return serve({"baselines": measure})


if __name__ == "__main__":
    sys.exit(main())
