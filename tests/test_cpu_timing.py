"""CPU timings (10): pinned to one torch thread, repeated, labelled as CPU timings wherever shown;
and verify on a CPU (11): progress as it goes, and only what the loop kept plugged in."""

from __future__ import annotations

import json

import pytest
import torch

from autokernel.cpu_timing import CPU_LABEL, pinned_threads, repeat
from autokernel.errors import BenchError
from autokernel.models import load_model
from autokernel.store import Store
from autokernel.workspace import Workspace

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU timing paths")


@pytest.fixture
def threads_seen():
    """llama-tiny with a hook that records torch's thread count at every forward."""
    bundle = load_model("llama-tiny", batch=1, seq=8, dtype="float32", device="cpu")
    seen: list[int] = []
    handle = bundle.model.register_forward_pre_hook(lambda m, a: seen.append(torch.get_num_threads()))
    yield bundle, seen
    handle.remove()


def test_pinned_threads_restores_the_pool():
    before = torch.get_num_threads()
    with pinned_threads():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_repeat_runs_a_cheap_call_many_times_and_an_expensive_one_its_minimum():
    now = [0.0]

    def clock():
        return now[0]

    def cheap():
        now[0] += 0.001

    def slow():
        now[0] += 5.0

    assert len(repeat(cheap, min_runs=3, max_runs=50, budget_s=1.0, clock=clock)) == 50
    assert repeat(slow, min_runs=2, budget_s=1.0, clock=clock) == pytest.approx([5.0, 5.0])


def test_forward_timing_on_the_cpu_is_pinned_and_repeated(threads_seen):
    from autokernel.profile import time_forward

    bundle, seen = threads_seen
    before = torch.get_num_threads()
    ms = time_forward(bundle, iters=2, warmup=1)
    assert ms > 0
    assert set(seen) == {1}  # every forward, warm-up included, on one thread
    assert len(seen) > 1 + 2  # a tiny forward is repeated beyond the 2 asked for, within the budget
    assert torch.get_num_threads() == before


def test_profiling_on_the_cpu_is_pinned(threads_seen):
    from autokernel.profile import profile_model

    bundle, seen = threads_seen
    result = profile_model(bundle, warmup=1, iters=2)
    assert result.time_basis == "cpu self time" and set(seen) == {1}


PINNED_CHECK = '''
import os
import torch
KERNEL_TYPE = "reduce"
BACKEND = "triton"

def kernel_fn(x):
    # the candidate's CPU timing child runs on one thread, native pools included
    assert torch.get_num_threads() == 1, torch.get_num_threads()
    assert os.environ.get("OMP_NUM_THREADS") == "1" and os.environ.get("OPENBLAS_NUM_THREADS") == "1"
    return x.sum(-1)
'''


def test_the_loops_candidate_timing_child_is_pinned():
    from autokernel.cpu_timing import cpu_wallclock

    t = cpu_wallclock(PINNED_CHECK, kernel_type="reduce", shapes=[{"rows": 4, "cols": 64}], timeout_s=120)
    assert t["latency_us"] > 0 and t["eager_us"] > 0
    with pytest.raises(BenchError, match="assert"):
        cpu_wallclock(PINNED_CHECK.replace("== 1, torch", "== 99, torch"), kernel_type="reduce",
                      shapes=[{"rows": 4, "cols": 64}], timeout_s=120)


def test_verify_output_labels_cpu_timings(home, run_cli):
    from autokernel.extract import extract

    code, out, err = run_cli("verify", "--model", "llama-tiny", "--iters", "2")
    assert code == 0, err
    # nothing to plug in: the two timings would be of one model, so no speed-up is claimed
    assert "nothing plugged in, so no speed-up to measure" in out and "end-to-end" not in out
    assert "the reference output" in err and "timing the model at its workloads" in err  # progress, on stderr
    with Store(home.db) as store:
        store.add_profile("llama-tiny", [_entry("rmsnorm", 0.3), _entry("other", 0.7)], config=OPTS, device="cpu")
        extract(store, Workspace.open(home), top=1)
    code, out, err = run_cli("verify", "--model", "llama-tiny", "--iters", "1")
    assert code == 0, err
    assert f"forward ({CPU_LABEL}, median of repeated passes; not GPU speed): eager" in out
    assert "vs torch.compile (CPU timings); Amdahl prediction" in out


# -- 11. verify shows progress and, for the loop, plugs only what was kept ----------------------

OPTS = {"batch": 1, "seq": 8, "dtype": "float32", "device": "cpu"}


def _entry(t, share):
    return {"kernel_type": t, "label": t, "gpu_ms": share, "share": share, "calls": 1, "shapes": [], "weights": [],
            "dtype": "float32", "amdahl": 1 / (1 - share), "gemm_ms": 0.0}


def test_verify_for_the_loop_plugs_only_kept_kernels_and_reports_progress(home):
    from autokernel.extract import extract
    from autokernel.verify import verify

    with Store(home.db) as store:
        ws = Workspace.open(home)
        store.add_profile("llama-tiny", [_entry("rmsnorm", 0.3), _entry("softmax", 0.2), _entry("other", 0.5)],
                          config=OPTS, device="cpu")
        kernels = {k.kernel_type: k for k in extract(store, ws, top=2)}
        assert set(kernels) == {"rmsnorm", "softmax"}
        run = store.create_run("loop", model="llama-tiny")
        for t, k in kernels.items():  # both started; only rmsnorm improved (CPU: no speed-up over eager)
            store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type=t, proposer="baseline",
                                 status="baseline", commit=ws.head(k.name), latency_us=100.0)
        store.add_experiment(run_id=run.id, kernel_id=kernels["rmsnorm"].id, kernel_type="rmsnorm", proposer="search",
                             status="kept", commit=ws.head(kernels["rmsnorm"].name), latency_us=80.0)
        said: list[str] = []
        r = verify(store, ws, run_id=run.id, only_kept=True, time_iters=1, progress=said.append)
        assert r.ok and [v.name for v in r.plugged] == ["llama-tiny.rmsnorm"]
        assert "not plugged (nothing kept by the loop): llama-tiny.softmax" in r.notes
        assert said[0] == "loading llama-tiny" and "the reference output" in said
        assert "[1/1] llama-tiny.rmsnorm plugged in alone" in said
        # then the timing, workload by workload
        assert said[said.index("timing the model at its workloads") + 1] == "prefill 1x8: eager"
        # named explicitly, a kernel is checked whether kept or not; without only_kept every one is
        assert {v.name for v in verify(store, ws, kernels=["llama-tiny.softmax"], only_kept=True, time_iters=0,
                                       record=False).plugged} == {"llama-tiny.softmax"}
        assert len(verify(store, ws, time_iters=0, record=False).plugged) == 2
        rec = json.loads(store.get_run(r.run_id).notes)
        assert [k["name"] for k in rec["kernels"]] == ["llama-tiny.rmsnorm"]
