"""The bench: judges one kernel file (5 correctness stages, anti-cheat, GPU timing, roofline) in an
isolated worker subprocess. Importing this package does not import torch; `calibrate` and
`device_key` do, when called.

    bench_file(path, shapes=[...], weights=[...], dtype="bfloat16", quick=False, timeout_s=600,
               baselines=True, ceilings=None) -> BenchResult        # one-shot worker
    with BenchWorker() as w:                                       # many candidates, warm caches
        w.judge(path | None, source=..., ...) -> BenchResult
    calibrate(store, force=False, worker=None) -> Device           # measured ceilings, stored once
    ceilings_of(device) -> dict                                    # pass as ceilings= (GPU roofline)

Module map: runner (caller side, process control), sandbox and sandbox_enter (the child's
namespaces and read-only file system), isolation (its environment), worker (child main loop),
judge (one candidate end to end), stages (the five stages), checks (one check's guards, the
reference after the call), across_calls (inputs changed in place, earlier and sampled timed
outputs re-checked), integrity (what the judge trusts, compared after every call), launches and
share (anti-cheat evidence: own kernels, the library's share of the work, interpreter bounds
check), time_candidate and timing (the timing stage, CUDA events), ceilings (roofline).
"""

from __future__ import annotations

from autokernel.bench.result import (CHEAT, COMPILE_ERROR, CORRECT, CRASHED, INCORRECT, OOM, OUTCOMES, STAGES,
                                     TIMEOUT, BenchResult, StageVerdict)
from autokernel.bench.runner import BenchWorker, bench_file

__all__ = ["BenchResult", "StageVerdict", "BenchWorker", "bench_file", "calibrate", "device_key", "ceilings_of",
           "OUTCOMES", "STAGES", "CORRECT", "INCORRECT", "CHEAT", "CRASHED", "COMPILE_ERROR", "TIMEOUT", "OOM"]

CEILING_COLUMNS = ("copy_gbps", "matmul_tflops_fp32", "matmul_tflops_fp16", "matmul_tflops_bf16")


def device_key() -> str:
    """name|sm<capability>|torch<version> of this process's device (the devices table key)."""
    from autokernel.bench.ceilings import device_key as _key

    return _key()


def ceilings_of(device) -> dict | None:
    """The measured ceilings of a Device row as the dict bench_file(ceilings=...) takes."""
    if device is None or device.copy_gbps is None:
        return None
    return {c: getattr(device, c) for c in CEILING_COLUMNS}


def calibrate(store, force: bool = False, worker: BenchWorker | None = None):
    """Measure this device's ceilings once (in a bench worker) and keep them in the devices table.
    Returns the Device row; with force=False an existing measurement is reused."""
    key = worker.info.get("key") if worker is not None and worker.info.get("key") else device_key()
    dev = store.get_device(key)
    if dev is not None and dev.copy_gbps is not None and not force:
        return dev
    if worker is None:
        with BenchWorker() as w:
            reply = w.calibrate()
    else:
        reply = worker.calibrate()
    c = reply["ceilings"]
    return store.upsert_device(c.get("key") or key, name=c["name"], capability=c["capability"],
                               sm_count=c["sm_count"], memory_gb=c["memory_gb"],
                               torch_version=c["torch_version"], triton_version=c["triton_version"],
                               **{k: c[k] for k in CEILING_COLUMNS})
