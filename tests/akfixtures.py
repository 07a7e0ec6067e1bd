"""Shared test helpers: a real store filled with a small, known history; PYTHONPATH for subprocesses."""

from __future__ import annotations

import os
from pathlib import Path

from autokernel.store import Store

DESC = "block 256\twith a tab\nand a newline"
ROOT = Path(__file__).resolve().parents[1]


def pythonpath(*first) -> str:
    """`first` ahead of any PYTHONPATH already set, for subprocesses (scripts/gpu.sh sets one that
    holds the wheels the GPU machine lacks)."""
    parts = [str(p) for p in first] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts)


def fill_store(db: Path) -> dict:
    """Run 1: rmsnorm (baseline, kept, reverted, incorrect) and softmax (baseline, kept); run 2: one row."""
    with Store(db) as store:
        run = store.create_run("loop", model="llama")
        rms = store.add_kernel("llama.rmsnorm", "rmsnorm", model="llama", share=0.10)
        sm = store.add_kernel("llama.softmax", "softmax", model="llama", share=0.05)
        common = dict(run_id=run.id, backend="triton")
        store.add_experiment(**common, kernel_id=rms.id, kernel_type="rmsnorm", tag="rmsnorm-e1", status="baseline",
                             correctness="PASS", latency_us=100.0, speedup_vs_eager=1.0, speedup_vs_compile=0.8,
                             tflops=0.25, gbps=900.0, pct_peak=19.5, peak_vram_mb=12.0, commit="a" * 40,
                             description="starting kernel")
        store.add_experiment(**common, kernel_id=rms.id, kernel_type="rmsnorm", tag="rmsnorm-e2", status="kept",
                             correctness="PASS", latency_us=80.0, speedup_vs_eager=1.25, speedup_vs_compile=1.0,
                             tflops=0.3125, gbps=1125.0, pct_peak=24.375, peak_vram_mb=12.0, commit="b" * 40,
                             description=DESC)
        store.add_experiment(**common, kernel_id=rms.id, kernel_type="rmsnorm", tag="rmsnorm-e3", status="reverted",
                             correctness="PASS", latency_us=90.0, speedup_vs_eager=1.111, speedup_vs_compile=0.889,
                             commit="c" * 40, description="num_warps 8")
        store.add_experiment(**common, kernel_id=rms.id, kernel_type="rmsnorm", tag="rmsnorm-e4", status="incorrect",
                             correctness="FAIL", commit="d" * 40, description="drop the fp32 upcast")
        store.add_experiment(**common, kernel_id=sm.id, kernel_type="softmax", tag="softmax-e5", status="baseline",
                             correctness="PASS", latency_us=50.0, speedup_vs_eager=1.0, speedup_vs_compile=0.9,
                             commit="e" * 40, description="starting kernel")
        store.add_experiment(**common, kernel_id=sm.id, kernel_type="softmax", tag="softmax-e6", status="kept",
                             correctness="PASS", latency_us=25.0, speedup_vs_eager=2.0, speedup_vs_compile=1.5,
                             commit="f" * 40, description="one pass online softmax")
        run2 = store.create_run("loop", model="gpt2")
        store.add_experiment(run_id=run2.id, kernel_type="reduce", tag="reduce-e1", status="crashed",
                             correctness="ERROR", backend="cuda", description="illegal memory access")
    return {"run1": run.id, "run2": run2.id}
