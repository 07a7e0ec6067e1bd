"""GPU-only bench checks (skipped without CUDA): measured ceilings, honest timing of a real
kernel against eager and torch.compile, and the roofline fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel.bench import CORRECT, BenchWorker, calibrate, ceilings_of
from autokernel.store import Store

FAULTS = Path(__file__).parent / "faults"


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_calibrate_and_time_a_kernel_on_gpu(home):
    with Store(home.db) as store, BenchWorker() as worker:
        dev = calibrate(store, worker=worker)
        assert dev.copy_gbps > 500 and dev.matmul_tflops_bf16 > 50 and dev.matmul_tflops_fp32 > 5
        assert calibrate(store, worker=worker).id == dev.id  # stored once, reused
        shapes = [{"rows": 4096, "cols": 4096}, {"rows": 8192, "cols": 8192}]
        res = worker.judge(FAULTS / "good.py", shapes=shapes, weights=[1.0, 2.0], dtype="bfloat16",
                           timeout_s=300, ceilings=ceilings_of(dev))
    assert res.outcome == CORRECT, res.error
    assert res.gpu_timing and res.bound == "memory"
    per = res.extra["per_shape"]
    assert len(per) == 2 and all(p["reps"] >= 50 for p in per)
    assert res.latency_us == pytest.approx(per[0]["latency_us"] + 2 * per[1]["latency_us"])
    assert res.eager_us > 0 and res.compile_us > 0 and res.speedup_vs_eager > 0
    assert 0 < res.pct_peak < 150 and res.gbps > 10 and res.peak_vram_mb >= 0
    assert res.latency_iqr_us >= 0
