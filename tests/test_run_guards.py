"""Before a run writes anything: every option checked (a rejected one leaves no run behind and
`--resume` never picks a broken run), numbers out of range are usage errors naming the option, and
one writer per run: a second process on the same run or model is refused naming the holder's pid,
and a dead holder's lock is taken over."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from akfixtures import ROOT, pythonpath

from autokernel.errors import ConfigError, KernelBenchError, LockHeldError
from autokernel.store import Store


def _runs(home) -> list:
    if not home.db.exists():
        return []
    with Store(home.db) as store:
        return store.list_runs()


# -- 1. options are checked before any state is written ----------------------------------------


@pytest.mark.parametrize("args, code, words", [
    (("loop", "--model", "llama-tiny", "--agent", "bogus"), ConfigError.exit_code, "unknown agent 'bogus'"),
    (("loop", "--model", "llama-tiny", "--kernels", "nosuchtype"), ConfigError.exit_code, "nosuchtype"),
    (("loop", "--model", "llama-tiny", "--dtype", "fp8"), ConfigError.exit_code, "--dtype"),
    (("loop", "--model", "llama-tiny", "--backend", "metal"), ConfigError.exit_code, "--backend"),
    (("loop", "--model", "llama-tiny", "--agent", "llm", "--provider", "nope"), ConfigError.exit_code, "provider"),
    (("kb", "run", "--level", "1", "--source", "sample", "--problems", "999"), KernelBenchError.exit_code, "999"),
    (("kb", "run", "--level", "1", "--agent", "bogus"), ConfigError.exit_code, "unknown agent"),
])
def test_a_rejected_option_leaves_no_run_behind(args, code, words, home, run_cli):
    got, out, err = run_cli(*args)
    assert got == code, (out, err)
    assert words in err and err.strip().count("\n") == 0
    assert _runs(home) == []


def test_a_model_that_does_not_load_leaves_no_run_behind(home, run_cli):
    from autokernel.errors import ModelError

    got, out, err = run_cli("loop", "--model", "no/such-model-anywhere", "--no-verify")
    assert got == ModelError.exit_code, (out, err)
    assert _runs(home) == []


def test_library_calls_check_their_options_too(home):
    from autokernel.kb.runner import kb_run
    from autokernel.loop import run_loop
    from autokernel.workspace import Workspace

    with Store(home.db) as store:
        ws = Workspace.open(home)
        with pytest.raises(ConfigError, match="--hours must be more than 0"):
            run_loop(store, ws, model="llama-tiny", hours=-1)
        with pytest.raises(ConfigError, match="--max-experiments"):
            run_loop(store, ws, model="llama-tiny", max_experiments=0)
        with pytest.raises(ConfigError, match="--level must be 1-4"):
            kb_run(store, ws, level=7, source="sample")
        assert store.list_runs() == []


def test_resume_skips_runs_that_never_started(home):
    """A kb run with an experiment, then a newer one an older version left "running" with none:
    `kb run --resume` takes the one that ran."""
    from autokernel.runs import latest_resumable_run

    with Store(home.db) as store:
        good = store.create_run("kb", model="kb:sample:L1", config={"level": 1, "source": "sample"})
        store.add_experiment(run_id=good.id, kernel_type="kb", status="baseline")
        store.finish_run(good.id)
        broken = store.create_run("kb", model="kb:sample:L7", config={"level": 7, "source": "sample"})
        assert broken.status == "running"
        assert latest_resumable_run(store, "kb").id == good.id
        store.create_run("loop", model="x")
        with pytest.raises(Exception, match="no loop run to resume"):
            latest_resumable_run(store, "loop")


# -- 3. numbers out of range are usage errors -----------------------------------------------------


@pytest.mark.parametrize("args, option", [
    (("loop", "--model", "m", "--hours", "-1"), "--hours"),
    (("loop", "--model", "m", "--hours", "0"), "--hours"),
    (("loop", "--model", "m", "--hours", "nan"), "--hours"),
    (("loop", "--model", "m", "--max-experiments", "0"), "--max-experiments"),
    (("loop", "--model", "m", "--top", "0"), "--top"),
    (("loop", "--model", "m", "--timeout", "0"), "--timeout"),
    (("loop", "--model", "m", "--batch", "0"), "--batch"),
    (("kb", "run", "--level", "7"), "--level"),
    (("kb", "run", "--level", "1", "--hours", "-2"), "--hours"),
    (("kb", "run", "--level", "1", "-k", "-1"), "--experiments-per-problem"),
    (("profile", "--model", "m", "--iters", "0"), "--iters"),
    (("extract", "--top", "-3"), "--top"),
    (("verify", "--iters", "-1"), "--iters"),
])
def test_numbers_out_of_range_are_usage_errors(args, option, tmp_path, run_cli):
    home = tmp_path / "akhome"
    code, out, err = run_cli("--home", str(home), *args)
    assert code == 2, (out, err)
    assert option in err or option.lstrip("-") in err
    assert not home.exists()  # nothing written, not even the home


def test_resume_with_a_bad_option_leaves_the_run_as_it_was(home, run_cli):
    with Store(home.db) as store:
        run = store.create_run("loop", model="llama-tiny")
        store.finish_run(run.id, "interrupted")
    code, out, err = run_cli("loop", "--resume", str(run.id), "--hours", "-1")
    assert code == 2
    with Store(home.db) as store:
        assert store.get_run(run.id).status == "interrupted"


# -- 4. bench --shape ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape, words", [("abc", "expected rowsxcols as integers"),
                                          ("0x-5", "rows, cols must be at least 1"),
                                          ("4x", "2 dims")])
def test_a_bad_shape_names_the_option_and_records_nothing(shape, words, home, run_cli):
    code, out, err = run_cli("bench", "softmax", "--shape", shape)
    assert code == 2, (out, err)
    assert "--shape" in err and words in " ".join(err.split())
    assert _runs(home) == []


# -- 2. one writer per run ------------------------------------------------------------------------

HOLD = """
import sys, time
from autokernel.store import Store
store = Store(sys.argv[1])
store.acquire_lock(sys.argv[2], what="a loop on tiny")
print("held", flush=True)
time.sleep(600)
"""


def _hold(home, key: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": pythonpath(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(home.db), key], stdout=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_loop_on_the_same_model_is_refused_naming_the_holder(home, run_cli):
    with Store(home.db) as store:
        run = store.create_run("loop", model="tiny")
        store.finish_run(run.id, "interrupted")
    holder = _hold(home, "loop:tiny")
    try:
        code, out, err = run_cli("loop", "--model", "tiny", "--no-verify")
        assert code == LockHeldError.exit_code, (out, err)
        assert f"process {holder.pid}" in err and "a loop on tiny is already running" in err
        assert err.strip().count("\n") == 0
        code, out, err = run_cli("loop", "--resume", str(run.id), "--no-verify")
        assert code == LockHeldError.exit_code and f"process {holder.pid}" in err
        with Store(home.db) as store:
            assert [r.id for r in store.list_runs()] == [run.id]  # no new run, nothing profiled
            assert store.get_run(run.id).status == "interrupted"
            assert store.latest_profile() is None
    finally:
        holder.kill()
        holder.wait()
    # the holder was killed (-9): its lock is taken over
    with Store(home.db) as store:
        lock = store.acquire_lock("loop:tiny")
        assert lock.pid == os.getpid()
        store.release_lock("loop:tiny")
        assert store.get_lock("loop:tiny") is None


def test_a_second_kb_run_on_the_same_level_is_refused(home, run_cli):
    from autokernel.kb.problems import resolve_size

    size = resolve_size("auto", "sample")
    holder = _hold(home, "kb:kb:sample:L1" + ("" if size == "default" else f":{size}"))
    try:
        code, out, err = run_cli("kb", "run", "--level", "1", "--source", "sample", "--problems", "1")
        assert code == LockHeldError.exit_code, (out, err)
        assert "a kb run on sample:L1" in err and f"process {holder.pid}" in err
        assert _runs(home) == []
    finally:
        holder.kill()
        holder.wait()


def _race(db, key, barrier, results):
    from autokernel.store import Store

    store = Store(db)
    barrier.wait()
    try:
        store.acquire_lock(key)
        results.put("won")
        time.sleep(3)  # hold it while the others try
    except LockHeldError as exc:
        results.put(str(exc))
    finally:
        store.close()


def test_of_processes_taking_one_lock_at_once_exactly_one_wins(tmp_path):
    db = tmp_path / "ak.db"
    Store(db).close()
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(db, "loop:m", barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert got.count("won") == 1, got
    assert all("is already running in process" in g for g in got if g != "won")


def test_a_lock_is_released_on_every_exit(home):
    with Store(home.db) as store:
        with pytest.raises(KeyboardInterrupt):
            with store.locked("loop:m"):
                assert store.get_lock("loop:m").pid == os.getpid()
                raise KeyboardInterrupt
        assert store.get_lock("loop:m") is None


def test_a_lock_whose_pid_was_reused_is_taken_over(home):
    """A holder recorded with another start time than the live process of its pid is not that
    process (the pid was reused after a kill -9): taken over."""
    with Store(home.db) as store:
        store.acquire_lock("loop:m")
        conn = sqlite3.connect(home.db)
        conn.execute("""UPDATE locks SET pid = ?, start = '1' WHERE "key" = 'loop:m'""", (os.getppid(),))
        conn.commit()
        conn.close()
        assert store.acquire_lock("loop:m").pid == os.getpid()


def test_sigint_of_a_lock_holder_releases_it(home):
    """Ctrl-C in a holder: the lock goes with it (the next run need not wait for a liveness check)."""
    code = ("import sys, time\nfrom autokernel.store import Store\ns = Store(sys.argv[1])\n"
            "with s.locked('loop:m'):\n    print('held', flush=True)\n    time.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": pythonpath(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(home.db)], stdout=subprocess.PIPE, text=True, env=env,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout.readline().strip() == "held"
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    with Store(home.db) as store:
        assert store.get_lock("loop:m") is None
