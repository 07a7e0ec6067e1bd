"""The loop end to end on the CPU (Triton interpreter, tiny shapes): a real store, a real git
workspace, the real bench worker. The test kernel's DELAY_MS tunable makes one candidate certainly
faster (a sleep on the timed shape only, so the correctness stages stay quick); its VARIANT
"off_by_one" is certainly wrong."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from autokernel import paired
from autokernel.store import Store
from autokernel.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [{"rows": 3, "cols": 40}]

TINY_REDUCE = '''"""Row sums for the loop tests."""
import time

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"

BLOCK = 256
DELAY_MS = 300
VARIANT = "loop"

SEARCH_SPACE = {"BLOCK": [256, 512], "DELAY_MS": [0, 300], "VARIANT": ["loop", "off_by_one"]}


def valid_config(cfg):
    return cfg["BLOCK"] >= 256


@triton.jit
def _row_sum(x_ptr, out_ptr, cols, stride_r, stride_c, BLOCK: tl.constexpr, OFFSET: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride_r + offs * stride_c, mask=offs < cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0) + OFFSET)


def kernel_fn(x):
    if DELAY_MS and tuple(x.shape) == (3, 40):  # the timed shape only
        time.sleep(DELAY_MS / 1000.0)
    rows, cols = x.shape
    out = torch.empty(rows, device=x.device, dtype=x.dtype)
    _row_sum[(rows,)](x, out, cols, x.stride(0), x.stride(1), BLOCK=BLOCK,
                      OFFSET=1.0 if VARIANT == "off_by_one" else 0.0)
    return out
'''


def add_tiny_kernel(home, source: str = TINY_REDUCE, model: str = "tiny"):
    store = Store(home.db)
    ws = Workspace.open(home)
    name = f"{model}.reduce"
    sha = ws.add_kernel(name, source, "test kernel")
    k = store.add_kernel(name, "reduce", model=model, share=0.4, shapes=SHAPES, dtype="float32",
                         branch=ws.branch_name(name), base_commit=sha)
    return store, ws, k


def check_invariants(store, ws, kernel, run_id):
    """Numbers unique and contiguous, nothing running, kept rows really faster than the best before
    them, the branch head at the last kept commit, every experiment commit reachable by its ref."""
    rows = store.list_experiments(run_id=run_id)
    assert [e.number for e in rows] == list(range(1, len(rows) + 1))
    assert not [e for e in rows if e.status == "running"]
    best = best_iqr = None
    last_kept = None
    for e in rows:
        if e.status == "baseline":
            best, best_iqr = e.latency_us, e.latency_iqr_us
            assert e.commit == kernel.base_commit
        elif e.status == "kept":
            if e.paired_json:  # a near miss that its back-to-back pair with the best found faster (paired.py)
                v = json.loads(e.paired_json)
                assert v["faster"] and v["upper"] < 1.0 and e.latency_us < best
            else:
                noise = max(((e.latency_iqr_us or 0) + (best_iqr or 0)) / 2, 0.01 * best)
                assert e.latency_us < best - noise
            best, best_iqr, last_kept = e.latency_us, e.latency_iqr_us, e
        elif e.status == "reverted":
            assert e.latency_us is not None and e.correctness == "PASS"
        # CPU timings are never paired unless the test asks (paired.ON_CPU): a pair costs a minute there
        assert e.paired_json is None or paired.ON_CPU or torch.cuda.is_available()
        if e.status != "abandoned" or e.commit:
            assert e.commit and json.loads(e.config_json)
    assert ws.head(kernel.name) == (last_kept.commit if last_kept else kernel.base_commit)
    refs = ws.experiment_refs()
    for e in rows:
        if e.commit and e.proposer != "baseline":
            assert refs.get(e.tag) == e.commit
            assert "DELAY_MS = " in ws.read(kernel.name, e.commit)
    assert ws.list_worktrees() == []
    return rows


def test_search_loop_records_keeps_and_reverts(home):
    from autokernel.loop import run_loop

    store, ws, k = add_tiny_kernel(home)
    events = []
    summary = run_loop(store, ws, model="tiny", hours=1, max_experiments=3, verify=False, timeout_s=120,
                       on_event=events.append)
    rows = check_invariants(store, ws, k, summary.run_id)
    assert summary.status == "finished" and summary.experiments == 3
    assert rows[0].status == "baseline" and rows[0].proposer == "baseline"
    statuses = {e.status for e in rows[1:]}
    # the start's ring: a wrong variant (judged incorrect) and a 300 ms faster one (kept, the first
    # without the delay; later ones are compared with it)
    assert any(e.status == "incorrect" and e.correctness == "FAIL" for e in rows[1:])
    fast = [e for e in rows[1:] if json.loads(e.config_json)["DELAY_MS"] == 0
            and json.loads(e.config_json)["VARIANT"] == "loop"]
    assert fast and fast[0].status == "kept", [(e.config_json, e.status) for e in rows]
    assert "kept" in statuses
    assert all(e.duration_s and e.duration_s > 0 for e in rows)
    assert all(e.proposer == "search" for e in rows[1:])
    assert summary.kernels[0]["speedup_vs_baseline"] > 1.5
    head_src = ws.read(k.name)
    assert "DELAY_MS = 0" in head_src
    run = store.get_run(summary.run_id)
    assert run.status == "finished" and run.kind == "loop"
    kinds = {e.kind for e in events}
    assert {"baseline", "start", "done", "state"} <= kinds


def test_a_run_resumed_on_another_device_times_its_best_there_first(home):
    """Rows an H100 timed, the run resumed here: the best so far is timed again on this device
    before any candidate is compared with it; resumed on the same device, nothing is timed again."""
    from autokernel.loop import run_loop
    from autokernel.orchestrator import Orchestrator

    store, ws, k = add_tiny_kernel(home)
    first = run_loop(store, ws, model="tiny", hours=1, max_experiments=2, verify=False, timeout_s=120)
    before = store.list_experiments(run_id=first.run_id)
    here = before[0].device
    assert here and before[0].status == "baseline" and len(before) == 3
    for e in before:  # as if an H100 had timed them
        store.update_experiment(e.id, device="NVIDIA H100 80GB HBM3")
    events = []
    run_loop(store, ws, resume_run_id=first.run_id, verify=False, timeout_s=120, on_event=events.append)
    rows = store.list_experiments(run_id=first.run_id)
    assert len(rows) == 4  # max_experiments reached: the new start is all this session did
    new = rows[-1]
    assert (new.proposer, new.status, new.device, new.commit) == ("baseline", "baseline", here, ws.head(k.name))
    assert new.description == f"best so far, timed again on {here} (earlier rows: NVIDIA H100 80GB HBM3)"
    assert any(e.kind == "baseline" and "timed again" in e.message for e in events)
    st = Orchestrator.from_store(store, first.run_id, [k]).states[k.id]
    assert (st.best_us, st.device, st.best_commit) == (new.latency_us, here, new.commit)
    run_loop(store, ws, resume_run_id=first.run_id, verify=False, timeout_s=120)
    assert len(store.list_experiments(run_id=first.run_id)) == 4


def test_a_best_timed_again_on_another_device_times_the_library_there_too(home):
    """The start's library timings (eager, torch.compile) are another card's too: the best timed
    again here is judged with the library timed here, never given the other card's numbers."""
    from autokernel.loop import run_loop

    store, ws, k = add_tiny_kernel(home)
    first = run_loop(store, ws, model="tiny", hours=1, max_experiments=1, verify=False, timeout_s=120)
    start = store.list_experiments(run_id=first.run_id)[0]
    per = [{**r, "eager_us": 12345.0, "compile_us": 12345.0} for r in json.loads(start.details_json)]
    assert per and start.status == "baseline"
    # as a GPU run writes a start that timed the library, on an H100
    store.update_experiment(start.id, device="NVIDIA H100 80GB HBM3", details_json=json.dumps(per),
                            speedup_vs_eager=12345.0 * len(per) / start.latency_us)
    run_loop(store, ws, resume_run_id=first.run_id, verify=False, timeout_s=120)
    new = store.list_experiments(run_id=first.run_id)[-1]
    assert (new.proposer, new.status) == ("baseline", "baseline") and new.device != "NVIDIA H100 80GB HBM3"
    assert new.description.startswith("best so far, timed again on")
    assert "12345" not in (new.details_json or "") and new.eager_us != 12345.0 * len(per)


def _wait_for(pred, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_ctrl_c_then_kill_9_then_resume(home):
    """Ctrl-C ends the current experiment cleanly; a kill -9 leaves it running; --resume goes on
    with the same run, nothing lost, nothing counted twice."""
    store, ws, k = add_tiny_kernel(home)
    env = dict(os.environ, AUTOKERNEL_HOME=str(home.home), TRITON_INTERPRET="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    base = [sys.executable, "-m", "autokernel", "loop"]
    tail = ["--max-experiments", "4", "--no-verify", "--json", "--timeout", "120"]

    def mid_run(after: int = 0):
        def check():
            rows = store.list_experiments()
            done = [e for e in rows if e.proposer == "search" and e.status != "running"]
            running = [e for e in rows if e.proposer == "search" and e.status == "running" and e.commit
                       and e.number > after]
            return len(done) >= 1 and running and (done, running[0])
        return check

    # 1. Ctrl-C in the middle of an experiment
    proc = subprocess.Popen(base + ["--model", "tiny", "--hours", "1"] + tail, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        done, current = _wait_for(mid_run(), 400, "one finished experiment and one running with its commit")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out)["status"] == "interrupted"
    run_id = current.run_id
    row = store.get_experiment(current.id)
    assert (row.status, row.error) == ("abandoned", "interrupted")
    assert ws.list_worktrees() == [] and store.get_run(run_id).status == "interrupted"
    assert refs_ok(ws, row)

    # 2. resume, then kill -9 in the middle of the next experiment
    resume = base + ["--resume", str(run_id)] + tail
    proc = subprocess.Popen(resume, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        done, killed = _wait_for(mid_run(after=current.number), 400, "a running experiment after the resume")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert store.get_experiment(killed.id).status == "running"
    assert ws.list_worktrees(), "the killed experiment's worktree is left behind"

    # 3. resume again: the dead row is abandoned, its worktree removed, the run finishes
    total = len([e for e in store.list_experiments(run_id=run_id) if e.proposer == "search"]) + 1
    fin = subprocess.run(base + ["--resume", str(run_id), "--max-experiments", str(total), "--no-verify", "--json",
                                 "--timeout", "120"], env=env, capture_output=True, text=True, timeout=400)
    assert fin.returncode == 0, fin.stderr[-3000:]
    summary = json.loads(fin.stdout)
    rows = check_invariants(store, ws, k, run_id)
    assert summary["run_id"] == run_id and summary["status"] == "finished"
    for e in done:  # nothing lost: rows finished before the kill are unchanged
        again = store.get_experiment(e.id)
        assert (again.status, again.commit, again.latency_us) == (e.status, e.commit, e.latency_us)
    assert store.get_experiment(killed.id).status == "abandoned"
    assert [e.proposer for e in rows].count("baseline") == 1
    assert len([e for e in rows if e.proposer == "search"]) == total == summary["experiments"]
    assert rows[-1].number == killed.number + 1  # numbering continued after the abandoned row
    assert store.get_run(run_id).status == "finished"
    assert len({e.commit for e in rows if e.commit}) == len([e for e in rows if e.commit])
    # the search's study lived through the interruptions (one journal file under the home): every
    # proposal a trial, the killed one settled, and no candidate judged twice
    import optuna

    from autokernel.proposers.study import journal_storage

    judged = [e for e in rows if e.status != "abandoned"]
    assert len({e.candidate_key for e in judged}) == len(judged)
    storage = journal_storage(home.studies)
    (name,) = optuna.study.get_all_study_names(storage)
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert len(trials) >= len([e for e in rows if e.proposer == "search"])
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING][:-1]


def refs_ok(ws, row) -> bool:
    """An abandoned experiment's commit is still reachable by its ref."""
    return ws.experiment_refs().get(row.tag) == row.commit


def test_a_candidate_that_fails_only_in_cpu_timing_is_its_result(home):
    """Issue 21, bug 2: a correct candidate that exits or hangs in the CPU timing step aborted the run
    (a BenchError, exit 11); it is the candidate's outcome: crashed, or timeout."""
    from autokernel.bench.result import CORRECT, CRASHED, TIMEOUT, BenchResult
    from autokernel.cpu_timing import CPUTimedJudge

    def judged_correct(source, **kw):  # the stages' verdict; timing is what is under test
        return BenchResult(kernel_type="reduce", backend="triton", outcome=CORRECT)

    judge = CPUTimedJudge(judged_correct)
    trap = "import sys as _sys, time as _time\nif 'autokernel.cpu_timing' in _sys.modules:\n    {}\n"
    kw = dict(kernel_type="reduce", shapes=SHAPES, weights=[1.0], dtype="float32")
    exits = judge(TINY_REDUCE + trap.format("raise SystemExit(3)"), timeout_s=120, **kw)
    assert exits.outcome == CRASHED and "exited with status 3" in exits.error
    assert exits.experiment_fields()["status"] == "crashed"
    hangs = judge(TINY_REDUCE + trap.format("_time.sleep(3600)"), timeout_s=6, **kw)
    assert hangs.outcome == TIMEOUT and "cpu-timing: exceeded its time limit (6 s)" in hangs.error
    fine = judge(TINY_REDUCE.replace("DELAY_MS = 300", "DELAY_MS = 0"), timeout_s=120, **kw)
    assert fine.outcome == CORRECT and fine.latency_us > 0 and fine.extra["per_shape"][0]["shape"] == SHAPES[0]
