"""The device's measured ceilings (the roofline's denominators) and its identity.

Measured, never looked up: a large device copy (bytes read + written per second) and a large
cuBLAS matmul per dtype. The datasheet figures are kept only as a side note for the report.
"""

from __future__ import annotations

import statistics
import time

import torch

# Side note only (H200 SXM datasheet, dense): never used to compute pct_peak.
DATASHEET = {"NVIDIA H200": {"hbm_gbps": 4800.0, "bf16_tflops": 989.0, "fp16_tflops": 989.0, "tf32_tflops": 494.0,
                             "fp32_tflops": 67.0}}


def device_info() -> dict:
    import triton

    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        cap = f"{p.major}.{p.minor}"
        name, sms, mem = p.name, p.multi_processor_count, p.total_memory / 2**30
    else:
        import platform

        name, cap, sms, mem = f"cpu {platform.machine()}", "", 0, 0.0
    return {"name": name, "capability": cap, "sm_count": sms, "memory_gb": round(mem, 1),
            "torch_version": torch.__version__, "triton_version": triton.__version__,
            "cuda_version": torch.version.cuda or "", "key": f"{name}|sm{cap}|torch{torch.__version__}"}


def device_key() -> str:
    """name + compute capability + torch version: the devices table's key."""
    return device_info()["key"]


def _time_ms(fn, reps: int) -> float:
    if torch.cuda.is_available():
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        return statistics.median(ts)
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def measure_ceilings() -> dict:
    """Copy bandwidth (GB/s, read + write) and matmul TFLOP/s per dtype on this device."""
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    n = (1 << 28) if cuda else (1 << 23)  # 1 GiB / 32 MiB of fp32
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)
    ms = _time_ms(lambda s=src, d=dst: d.copy_(s), 20 if cuda else 5)
    out = {"copy_gbps": 2 * n * 4 / (ms * 1e-3) / 1e9}
    del src, dst
    size = 8192 if cuda else 256
    for dtype, col in ((torch.float32, "matmul_tflops_fp32"), (torch.float16, "matmul_tflops_fp16"),
                       (torch.bfloat16, "matmul_tflops_bf16")):
        a = torch.randn(size, size, device=dev, dtype=dtype)
        b = torch.randn(size, size, device=dev, dtype=dtype)
        ms = _time_ms(lambda a=a, b=b: torch.mm(a, b), 10 if cuda else 3)
        out[col] = 2 * size**3 / (ms * 1e-3) / 1e12
        del a, b
    if cuda:
        torch.cuda.empty_cache()
    out.update(device_info())
    out["datasheet"] = DATASHEET.get(out["name"], {})
    out["method"] = (f"copy of {n * 4 >> 20} MiB (read+write); {size}^3 torch.mm per dtype "
                     f"(fp32 without TF32); median of repetitions")
    return out


_cached: dict | None = None


def ceilings_here() -> dict:
    """Measured once per worker process when the caller passed none."""
    global _cached
    if _cached is None:
        _cached = measure_ceilings()
    return _cached


def ceiling(ceilings: dict, compute_bound: bool, dtype_name: str) -> float | None:
    """The measured ceiling that bounds a kernel: cuBLAS TFLOP/s in its dtype, or copy GB/s."""
    if compute_bound:
        short = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[dtype_name]
        return ceilings.get(f"matmul_tflops_{short}")
    return ceilings.get("copy_gbps")


def floor_us(ceilings: dict, compute_bound: bool, dtype_name: str, flops: float, nbytes: float) -> float | None:
    """The least time the measured ceiling allows for this work (us), or None without a ceiling:
    the roofline's floor at one shape, so a timing can be held against it (bench.result.too_good)."""
    ceil = ceiling(ceilings, compute_bound, dtype_name)
    work = flops / 1e12 if compute_bound else nbytes / 1e9
    return 1e6 * work / ceil if ceil and work > 0 else None


def pct_of_ceiling(ceilings: dict, compute_bound: bool, dtype_name: str, tflops: float | None,
                   gbps: float | None) -> tuple[float | None, str]:
    ceil, rate = ceiling(ceilings, compute_bound, dtype_name), (tflops if compute_bound else gbps)
    return (100.0 * rate / ceil if ceil and rate is not None else None), ("compute" if compute_bound else "memory")
