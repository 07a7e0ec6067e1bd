"""The too-good-to-be-true flag (bench.result.too_good): a timing beyond belief is flagged for
review and never kept. The honest numbers below are the H100 starters' (benchmarks/RESULTS.md, the
first table): the old rule, 10x eager alone, flagged honest fused kernels whose eager is a chain of
unfused ops; the cheats are what an adversary's timing would look like at the same shapes."""

import pytest

from autokernel.bench.ceilings import floor_us
from autokernel.bench.result import CORRECT, FLAG_PCT_PEAK, FLAG_SPEEDUP, BenchResult, roofline_binds, too_good
from autokernel.screening import fill_library

# rmsnorm 8192x4096 bf16 on the H100: 40.1 us, 11.00x eager, 1.05x torch.compile, 79.5% of copy
RMS_US, RMS_EAGER, RMS_COMPILE, RMS_PCT = 40.1, 441.1, 42.1, 79.5


def test_an_honest_fused_kernel_past_10x_eager_is_not_flagged():
    assert RMS_EAGER / RMS_US > FLAG_SPEEDUP  # the old rule flagged this starter
    assert not too_good(RMS_US, RMS_EAGER, RMS_COMPILE, RMS_PCT)
    # the 2048x4096 rmsnorm (9.07x eager, 2.13x compile, 54.5%) and rotary (11.05x, 0.97x, 92%)
    assert not too_good(14.6, 14.6 * 9.07, 14.6 * 2.13, 54.5)
    assert not too_good(69.9, 69.9 * 11.05, 69.9 * 0.97, 92.0)


def test_past_10x_the_faster_library_path_is_flagged():
    """A kernel that skips its work (answers from a cache, writes a constant) is far faster than
    torch.compile's fused kernel; the library's faster path is the bar, whichever of the two it is."""
    assert too_good(RMS_COMPILE / 12, RMS_EAGER, RMS_COMPILE)
    assert too_good(4.0, eager_us=45.0, compile_us=None)  # compile failed: eager is the bar
    assert too_good(4.0, eager_us=None, compile_us=45.0)
    assert not too_good(4.5, eager_us=45.0, compile_us=None)  # exactly 10x is not past it


def test_past_the_roofline_is_flagged_whatever_the_library():
    """A slow library (both paths behind, as on an op eager and torch.compile handle badly) cannot
    hide a kernel that moves fewer bytes than the op needs: a quarter of the work of the rmsnorm
    above runs at 8x a library at twice its time, under the 10x bar, and at 4x its roofline %."""
    quarter = RMS_US / 4
    assert not too_good(quarter, eager_us=3 * RMS_US, compile_us=2 * RMS_US, pct_peak=None)
    assert too_good(quarter, eager_us=3 * RMS_US, compile_us=2 * RMS_US, pct_peak=4 * RMS_PCT)
    floor = RMS_US * RMS_PCT / 100  # the roofline's least time for the work
    assert too_good(quarter, floor_us=floor)
    assert not too_good(RMS_US, floor_us=floor)
    assert too_good(floor / (FLAG_PCT_PEAK / 100) * 0.99, floor_us=floor)
    assert not too_good(floor / (FLAG_PCT_PEAK / 100) * 1.01, floor_us=floor)  # noise over 100% allowed


def test_no_numbers_no_flag():
    assert not too_good(None, 100.0, 100.0, 500.0)
    assert not too_good(0.0, 100.0, 100.0, 500.0)
    assert not too_good(1.0)


def test_floor_is_the_work_over_the_measured_ceiling():
    ceilings = {"copy_gbps": 4000.0, "matmul_tflops_bf16": 700.0}
    assert floor_us(ceilings, False, "bfloat16", flops=1e9, nbytes=4e6) == pytest.approx(1.0)
    assert floor_us(ceilings, True, "bfloat16", flops=7e11, nbytes=4e6) == pytest.approx(1000.0)
    assert floor_us(ceilings, True, "float16", flops=7e11, nbytes=4e6) is None  # no fp16 ceiling measured
    assert floor_us({}, False, "bfloat16", flops=1e9, nbytes=4e6) is None


def test_fp32_matmul_is_not_held_to_the_cublas_fp32_ceiling():
    """Its ceiling is cuBLAS without TF32; a Triton dot takes TF32 by default and runs past it."""
    assert roofline_binds("memory", "float32") and roofline_binds("compute", "bfloat16")
    assert not roofline_binds("compute", "float32")
    tf32 = BenchResult("matmul", "triton", outcome=CORRECT, latency_us=100.0, pct_peak=400.0, bound="compute",
                       dtype="float32", extra={"per_shape": [{"shape": {"M": 4096}, "weight": 1.0, "latency_us": 100.0}]})
    fill_library(tf32, [{"shape": {"M": 4096}, "eager_us": 300.0, "compile_us": 290.0}])
    assert not tf32.flagged
    half = BenchResult("matmul", "triton", outcome=CORRECT, latency_us=100.0, pct_peak=400.0, bound="compute",
                       dtype="bfloat16", extra={"per_shape": [{"shape": {"M": 4096}, "weight": 1.0, "latency_us": 100.0}]})
    fill_library(half, [{"shape": {"M": 4096}, "eager_us": 300.0, "compile_us": 290.0}])
    assert half.flagged


def _timed(lat_per_shape: float, pct: float | None = None) -> BenchResult:
    return BenchResult("rmsnorm", "triton", outcome=CORRECT, latency_us=2 * lat_per_shape, pct_peak=pct,
                       bound="memory", dtype="bfloat16",
                       extra={"per_shape": [{"shape": {"rows": 8192, "cols": 4096}, "weight": 2.0,
                                             "latency_us": lat_per_shape}]})


def test_the_loop_flags_totals_by_the_same_rule():
    """fill_library, which gives a candidate timed alone the run's library times, flags as the bench
    does: the honest rmsnorm is kept eligible, past 10x compile or past the roofline is not."""
    start = [{"shape": {"rows": 8192, "cols": 4096}, "weight": 2.0, "eager_us": RMS_EAGER,
              "compile_us": RMS_COMPILE}]
    honest = _timed(RMS_US, RMS_PCT)
    fill_library(honest, start)
    assert honest.speedup_vs_eager == pytest.approx(11.0, rel=1e-3) and not honest.flagged
    cached = _timed(RMS_COMPILE / 11, None)
    fill_library(cached, start)
    assert cached.flagged
    skipping = _timed(RMS_US / 2, 2 * RMS_PCT)
    fill_library(skipping, start)
    assert skipping.speedup_vs_compile == pytest.approx(2.1, rel=1e-2) and skipping.flagged
