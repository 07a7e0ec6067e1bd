"""The fault suite: planted kernels (tests/faults/) that crash, hang, write out of bounds, return
NaN / the wrong dtype / an alias of the input / a partly unwritten or cached result, or call the
torch op instead of a kernel. Each must get the right outcome, with the error's tail, and the test
process must survive. CPU: Triton interpreter. GPU: the same files, marked `gpu`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from autokernel.bench import (CHEAT, COMPILE_ERROR, CORRECT, CRASHED, INCORRECT, OOM, TIMEOUT, BenchWorker,
                              bench_file)

FAULTS = Path(__file__).parent / "faults"

# file -> (accepted outcomes, a phrase the error must contain)
EXPECTED = {
    "crash": ({CRASHED}, "planted crash"),
    "nan_output": ({INCORRECT}, "NaN"),
    "wrong_dtype": ({INCORRECT}, "dtype torch.float64"),
    "alias": ({INCORRECT}, "aliases input 0"),
    "writes_input": ({INCORRECT}, "wrote into input 0"),
    "unwritten": ({INCORRECT}, "NaN"),
    "cached": ({INCORRECT}, "outside atol"),
    "torch_op": ({CHEAT}, ""),
    "oob_write": ({CRASHED, INCORRECT}, "illegal"),
    "syntax_error": ({COMPILE_ERROR}, "syntax error"),
    "no_entry": ({COMPILE_ERROR}, "no kernel_fn"),
    "import_error": ({COMPILE_ERROR}, "triton_that_does_not_exist"),
    "oom": ({OOM}, "allocate"),
    "tamper": ({CHEAT}, "modified the bench"),
    # correct under the interpreter: caught on the CPU by the sm_90 compile check, on the GPU by Triton
    "gpu_uncompilable": ({COMPILE_ERROR}, "Loop-carried variable offs"),
}


@pytest.fixture(scope="module")
def worker():
    with BenchWorker() as w:
        yield w


def _judge(worker, name: str, **kw):
    return worker.judge(FAULTS / f"{name}.py", quick=kw.pop("quick", True), timeout_s=kw.pop("timeout_s", 60),
                        gpu_compile=True, **kw)


@pytest.mark.timeout(300)
def test_good_kernel_passes_every_stage(worker):
    res = _judge(worker, "good", quick=False)
    assert res.outcome == CORRECT, res.error
    assert [s.name for s in res.stages] == ["smoke", "shapes", "stability", "determinism", "edge", "gpu-compile"]
    assert all(s.status == "pass" for s in res.stages), res.stages
    # Every dtype the spec supports was swept in full mode; errors are real, small, and recorded.
    assert "float16" in res.stage("shapes").detail and "bfloat16" in res.stage("shapes").detail
    assert 0 < res.stage("smoke").max_abs_err < 1e-4
    assert res.launched_kernels == ["_row_sum"]
    assert res.gpu_timing is False and res.latency_us is None  # no fake timings on the CPU
    assert "interpreter" in res.extra["timing"].lower()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fault_is_caught(worker, name):
    outcomes, phrase = EXPECTED[name]
    res = _judge(worker, name)
    assert res.outcome in outcomes, (res.outcome, res.error)
    assert res.error and phrase in res.error, res.error
    assert not res.correct


@pytest.mark.timeout(120)
def test_hang_is_stopped_by_the_stage_alarm(worker):
    t0 = time.monotonic()
    res = _judge(worker, "hang", timeout_s=4)
    assert res.outcome == TIMEOUT
    assert "smoke" in res.error
    # the stage's detail says what happened (a timeout carries no message of its own)
    assert res.stage("smoke").detail == "exceeded its time limit"
    assert time.monotonic() - t0 < 30
    # The same worker judges the next candidate correctly.
    assert _judge(worker, "good").outcome == CORRECT


@pytest.mark.timeout(120)
def test_hang_at_import_is_a_timeout(worker):
    """Issue 21, bug 10: a kernel that hangs at import was labelled crashed (a compile error)."""
    t0 = time.monotonic()
    res = _judge(worker, "hang_at_import", timeout_s=4)
    assert res.outcome == TIMEOUT, res.error
    assert res.error == "load: exceeded its time limit" and res.experiment_fields()["status"] == "timeout"
    assert time.monotonic() - t0 < 30
    assert _judge(worker, "good").outcome == CORRECT


@pytest.mark.timeout(120)
def test_hang_inside_a_triton_kernel(worker):
    # Under the interpreter the alarm fires inside Triton, which wraps it: still a timeout.
    res = _judge(worker, "hang_in_kernel", timeout_s=4)
    assert res.outcome == TIMEOUT, res.error
    assert res.stage("smoke").status == "error"
    assert res.stage("smoke").detail == "exceeded its time limit"


@pytest.mark.timeout(120)
def test_hang_that_blocks_signals_is_killed_by_the_parent(worker):
    before = worker.restarts
    t0 = time.monotonic()
    res = _judge(worker, "hang_hard", timeout_s=3)
    assert res.outcome == TIMEOUT
    assert "killed after" in res.error
    assert time.monotonic() - t0 < 40
    assert not worker.alive()  # the process group is gone; the next judge restarts it
    assert _judge(worker, "good").outcome == CORRECT
    assert worker.restarts == before + 1


@pytest.mark.timeout(120)
def test_worker_survives_a_hard_crash_of_the_child(worker, tmp_path):
    # os._exit inside the candidate kills the child outright (as a segfault would).
    src = (FAULTS / "good.py").read_text().replace("    if x.stride(-1) != 1:", "    import os\n    os._exit(3)\n    if x.stride(-1) != 1:")
    res = worker.judge(source=src, quick=True, timeout_s=30)
    assert res.outcome == CRASHED
    assert "exited with status 3" in res.error
    assert _judge(worker, "good").outcome == CORRECT


@pytest.mark.timeout(120)
def test_child_environment_has_no_credentials(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "planted")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "planted")
    monkeypatch.setenv("HF_TOKEN", "planted")
    res = bench_file(FAULTS / "env_probe.py", quick=True, timeout_s=60)
    assert res.outcome == CORRECT, res.error
    assert os.environ["OPENAI_API_KEY"] == "sk-planted"  # the caller's own environment is untouched


# -- the same planted files on the GPU (lead runs these on the H200) ------------------------------------

@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(EXPECTED) + ["good"])
def test_fault_on_gpu(worker, name):
    res = _judge(worker, name, timeout_s=120)
    if name == "good":
        assert res.outcome == CORRECT, res.error
        assert res.gpu_timing and res.latency_us > 0 and res.eager_us > 0
        assert "_row_sum" in res.launched_kernels
        return
    outcomes, phrase = EXPECTED[name]
    assert res.outcome in outcomes, (res.outcome, res.error)
    if name != "oob_write":  # the GPU reports an illegal address in its own words
        assert res.error and phrase in res.error, res.error


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_hang_on_gpu(worker):
    assert _judge(worker, "hang_hard", timeout_s=10).outcome == TIMEOUT
    assert _judge(worker, "good", timeout_s=120).outcome == CORRECT
