"""The bench's baselines come from a trusted process (bench/baselines.py, bench/baseline_worker.py):
the judge's child, which imports the candidate, times no reference, and the parent sets the
reported baselines and speed-ups from the numbers it holds. Real child processes throughout."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel.bench import CORRECT, BenchResult, BenchWorker
from autokernel.bench.baseline_worker import CPU_REPLY
from autokernel.bench.baselines import TrustedBaselines, by_shape, settle
from autokernel.objective import shape_key

CHEATS = Path(__file__).parent / "cheats"
KEY = "NVIDIA H200|sm9.0|torch2.11"


def _trusted(**more) -> dict:
    return {"device_key": KEY, "dtype": "bfloat16", "compile_mode": "max-autotune-no-cudagraphs",
            "baselines": [{"shape": {"rows": 8, "cols": 4096}, "eager_us": 30.0, "compile_us": 20.0,
                           "eager_wall_us": 40.0},
                          {"shape": {"rows": 4096, "cols": 4096}, "eager_us": 90.0, "compile_us": 60.0,
                           "eager_wall_us": 95.0}], **more}


def _judged(planted: float = 1e6) -> BenchResult:
    """A GPU result as a judge's child might return it, its baselines planted by the candidate."""
    per = [{"shape": {"cols": 4096, "rows": 8}, "weight": 1.0, "latency_us": 10.0, "eager_us": planted,
            "compile_us": planted, "eager_wall_us": planted},
           {"shape": {"rows": 4096, "cols": 4096}, "weight": 2.0, "latency_us": 30.0, "eager_us": planted,
            "compile_us": planted, "eager_wall_us": planted}]
    return BenchResult(kernel_type="rmsnorm", backend="triton", outcome=CORRECT, dtype="bfloat16", gpu_timing=True,
                       latency_us=70.0, eager_us=3 * planted, compile_us=3 * planted, speedup_vs_eager=9e4,
                       speedup_vs_compile=9e4, extra={"per_shape": per})


def test_the_parent_reports_its_own_baselines_not_the_childs():
    res = _judged()
    settle(res, _trusted(), KEY)
    assert res.eager_us == pytest.approx(30.0 + 2 * 90.0)
    assert res.compile_us == pytest.approx(20.0 + 2 * 60.0)
    assert res.speedup_vs_eager == pytest.approx(210.0 / 70.0)
    assert res.speedup_vs_compile == pytest.approx(140.0 / 70.0)
    assert [r["eager_wall_us"] for r in res.extra["per_shape"]] == [40.0, 95.0]
    assert "baseline_error" not in res.extra


@pytest.mark.parametrize("trusted, why", [
    (None, "no baselines from the trusted timing process"),
    ({"error": "the trusted timing process died: out of memory"}, "died: out of memory"),
    (_trusted(device_key="NVIDIA A100|sm8.0|torch2.11"), "are for NVIDIA A100"),
    (_trusted(dtype="float16"), "float16, not"),
])
def test_without_trusted_numbers_for_this_device_and_dtype_there_are_no_speedups(trusted, why):
    res = _judged()
    settle(res, trusted, KEY)
    assert res.eager_us is None and res.compile_us is None
    assert res.speedup_vs_eager is None and res.speedup_vs_compile is None
    assert why in res.extra["baseline_error"]
    assert all(r["compile_us"] is None for r in res.extra["per_shape"])


def test_a_shape_the_trusted_process_did_not_time_leaves_the_totals_empty():
    trusted = _trusted()
    trusted["baselines"][1].update(eager_us=None, compile_us=None, error="RuntimeError: out of memory")
    res = _judged()
    settle(res, trusted, KEY)
    assert res.eager_us is None and res.speedup_vs_compile is None
    assert res.extra["per_shape"][0]["compile_us"] == 20.0
    assert res.extra["baseline_error"]


def test_shapes_match_whatever_the_order_of_their_keys():
    known, why = by_shape(_trusted(), KEY, "bfloat16")
    assert why is None
    assert known[shape_key({"cols": 4096, "rows": 8})]["eager_us"] == 30.0


def test_a_result_without_gpu_timing_is_left_alone():
    res = BenchResult(kernel_type="rmsnorm", backend="triton", outcome=CORRECT, dtype="float32")
    settle(res, None, KEY)
    assert res.eager_us is None and "baseline_error" not in res.extra


@pytest.mark.timeout(300)
def test_the_trusted_process_times_nothing_without_a_gpu_and_names_a_bad_kernel_type():
    with TrustedBaselines() as t:
        reply = t.numbers("rmsnorm", None, None)
        assert reply["baselines"] == [] and reply["timing"] == CPU_REPLY, reply
        assert reply["dtype"] == "float32" and reply["device"].startswith("cpu")
        bad = t.numbers("no_such_kernel", None, None)
        assert "no_such_kernel" in bad["error"] and "\n" not in bad["error"]
        assert t.isolation.detail.startswith("none: the trusted timing process")


@pytest.mark.timeout(300)
def test_on_the_cpu_the_judge_starts_no_trusted_process():
    with BenchWorker() as w:
        res = w.judge(CHEATS / "bench" / "baseline_plant.py", timeout_s=120, quick=True)
        assert res.outcome == CORRECT, res.error  # an honest kernel besides its plant
        assert w._trusted is None and not res.gpu_timing


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_trusted_baselines_on_gpu_cover_every_default_shape():
    from autokernel.kernels import get_spec

    spec = get_spec("rmsnorm")
    with TrustedBaselines() as t:
        reply = t.numbers("rmsnorm", None, None)
    assert reply["dtype"] == "bfloat16" and reply["device_key"], reply
    assert len(reply["baselines"]) == len(spec.default_shapes)
    for b in reply["baselines"]:
        assert b["eager_us"] > 0 and b["compile_us"] > 0 and b["eager_wall_us"] > 0, b
    assert reply["ceilings"]["copy_gbps"] > 100


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_baselines_planted_in_the_judges_child_never_reach_the_result_on_gpu():
    """Before the trusted process, the plant's 2 ms compiled reference made it look ~100x faster
    than torch.compile. Now both judgements report the trusted process's numbers for the shape."""
    from autokernel.kernels import starter_path

    shapes = [{"rows": 4096, "cols": 4096}]
    with BenchWorker() as w:
        honest = w.judge(starter_path("reduce", "triton"), shapes=shapes, timeout_s=300, quick=True)
        plant = w.judge(CHEATS / "bench" / "baseline_plant.py", shapes=shapes, timeout_s=300, quick=True)
    assert honest.outcome == CORRECT and plant.outcome == CORRECT, (honest.error, plant.error)
    assert honest.compile_us and plant.compile_us == honest.compile_us
    assert plant.eager_us == honest.eager_us and plant.compile_us < 1000
    assert plant.speedup_vs_compile < 5, plant.speedup_vs_compile
