"""The bench: judges one kernel file (5 correctness stages, anti-cheat, GPU timing, roofline) in an
isolated worker subprocess. Importing this package does not import torch; `calibrate` and
`device_key` do, when called."""

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
