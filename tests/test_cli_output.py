"""What a user sees: tables whole in a pipe or a log, the loop's last screen (short, rounded, where
the kernels are, what to run next), `autokernel show`, kernels named by a short name, the run log."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from akfixtures import ROOT, pythonpath

from autokernel.errors import NotFoundError
from autokernel.kernels import starter_path
from autokernel.store import Store
from autokernel.workspace import Workspace

LONG = "a-model-with-a-rather-long-preset-name-for-testing.rmsnorm"


def _cli(*args: str, home) -> subprocess.CompletedProcess:
    """The CLI in a child whose stdout is a pipe, as in `... | tee log` (no terminal, no COLUMNS)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(PYTHONPATH=pythonpath(ROOT), AUTOKERNEL_HOME=str(home.home))
    return subprocess.run([sys.executable, "-m", "autokernel", *args], capture_output=True, text=True, env=env,
                          timeout=180, stdin=subprocess.DEVNULL)


# -- 6. tables are not cut to 80 columns when the output is not a terminal ----------------------


def test_tables_in_a_pipe_keep_every_name_whole(home):
    res = _cli("kb", "list", "--source", "sample", home=home)
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    from autokernel.kb.problems import load_problems

    for p in load_problems("sample", None, size="tiny"):
        assert f" {p.name} " in res.stdout, p.name
    assert max(len(line) for line in res.stdout.splitlines()) > 80  # nothing squeezed into 80 columns


def test_the_loop_table_in_a_log_keeps_long_kernel_names(capsys):
    from autokernel.cli.loop import kernels_table
    from autokernel.cli.console import out

    k = {"name": LONG, "share": 0.25, "baseline_us": 1234.5, "best_us": 1000.25, "speedup": 1.2345,
         "speedup_vs_baseline": 1.2345, "pct_peak": None, "attempts": 12, "kept": 3, "time_s": 75.0,
         "exhausted": False, "plateaued": True}
    out.print(kernels_table([k], title="loop run 1"))
    text = capsys.readouterr().out
    assert LONG in text and "…" not in text and "plateau" in text


# -- 7. the loop's last screen --------------------------------------------------------------------


def _summary(home, timing: str = "cpu"):
    """A real run in a real store, summarized as the loop summarizes it, with a verify result."""
    from autokernel.loop import summarize

    with Store(home.db) as store:
        run = store.create_run("loop", model="llama-tiny", agent="search")
        names = {}
        for t, share, start, kept in (("rmsnorm", 0.123456, 812.3456, 571.98765), ("softmax", 0.0876, 91.0, None),
                                      ("matmul", 0.4, 3000.0, 2500.0)):
            k = store.add_kernel(f"llama-tiny.{t}", t, model="llama-tiny", share=share)
            names[t] = k.name
            store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type=t, proposer="baseline",
                                 status="baseline", latency_us=start, duration_s=2.0)
            store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type=t, proposer="search",
                                 status="kept" if kept else "reverted", latency_us=kept or start * 1.1,
                                 duration_s=3.0)
        s = summarize(store, run.id, status="finished", reason="time budget spent")
    s.timing = timing
    s.verify = {"ok": True, "rel_error": 2.123456e-7, "tolerance": 1e-4, "device": "cpu" if timing == "cpu" else "H200",
                "speedup_vs_eager": 0.29493617899467756, "speedup_vs_compile": None,
                "amdahl_prediction": 1.0612345, "eager_ms": 0.98, "plugged_ms": 3.3,
                "kernels": [{"name": names["rmsnorm"], "ok": True, "slower": False},
                            {"name": names["matmul"], "ok": True, "slower": False}]}
    return s


def test_the_last_screen_says_what_happened_and_what_next(home, capsys):
    from autokernel.cli.loop import print_summary

    print_summary(_summary(home), table=False, log=".autokernel/logs/loop-run1.log")
    text = capsys.readouterr().out
    lines = text.strip("\n").splitlines()
    assert len(lines) < 15, text
    head = lines[0]
    assert head == "loop run 1 on llama-tiny: finished (time budget spent)"
    assert "3 experiments (+3 starting points) in 0m15s, 2 kept" in text
    assert "CPU timings, 1 thread" in text and "not GPU speed" in text
    # per kernel: rounded speed-up, kept count and where its best version is
    rms = next(line for line in lines if "llama-tiny.rmsnorm" in line)
    assert "1.42x its start, 1 kept" in rms and rms.rstrip().endswith("autokernel show llama-tiny.rmsnorm")
    assert "1.00x its start, 0 kept" in next(line for line in lines if "llama-tiny.softmax" in line)
    assert "verified: outputs match the original (rel. error 2.1e-07); plugged in: llama-tiny.rmsnorm, " \
           "llama-tiny.matmul" in text
    assert "model speed-up: 0.29x eager (CPU timings, 1 thread: says nothing about a GPU); Amdahl predicted 1.06x" in text
    assert "autokernel report --run 1 --format md" in text
    assert "autokernel export llama-tiny.rmsnorm --repo-id ORG/NAME" in text  # the most improved kernel
    assert "import autokernel; autokernel.apply(model)" in text
    assert ".autokernel/logs/loop-run1.log" in text
    # rounded: no raw floats such as 0.29493617899467756
    assert not re.search(r"\d\.\d{4,}", text), text


def test_the_last_screen_on_a_gpu_names_speedups_over_eager_and_compile(home, capsys):
    from autokernel.cli.loop import print_summary

    s = _summary(home, timing="gpu")
    s.verify.update(speedup_vs_eager=1.2345, speedup_vs_compile=0.987)
    s.kernels[0].update(speedup=1.5, speedup_vs_baseline=1.2)
    print_summary(s, table=False)
    text = capsys.readouterr().out
    assert "CPU" not in text
    assert "model speed-up: 1.23x eager, 0.99x torch.compile; Amdahl predicted 1.06x" in text
    assert "1.50x eager" in text


def test_with_nothing_plugged_in_no_model_speedup_is_claimed(home, capsys):
    """Eager and "plugged" are then the same model: any ratio of their timings is noise."""
    from autokernel.cli.loop import print_summary

    s = _summary(home)
    s.verify["kernels"] = []
    s.verify["speedup_vs_eager"] = 1.27
    print_summary(s, table=False)
    text = capsys.readouterr().out
    assert "nothing plugged in (no kernel kept that beat its start), so no model speed-up to measure" in text
    assert "1.27" not in text and "model speed-up:" not in text


def test_a_failed_verify_and_an_interrupt_say_so(home, capsys):
    from autokernel.cli.loop import print_summary

    s = _summary(home)
    s.verify, s.verify_error, s.status = None, "model llama-tiny not found", "interrupted"
    print_summary(s, table=False)
    text = capsys.readouterr().out
    assert "verify failed: model llama-tiny not found" in text
    assert "continue with `autokernel loop --resume 1`" in text


# -- autokernel show / export by short name (9) ----------------------------------------------------


@pytest.fixture
def kept_kernel(home):
    source = starter_path("rmsnorm", "triton").read_text()
    better = source.replace("\nKERNEL_TYPE", "\n# the kept version\nKERNEL_TYPE", 1)
    assert better != source
    with Store(home.db) as store:
        ws = Workspace.open(home)
        base = ws.add_kernel("llama-tiny.rmsnorm", source, "starter")
        k = store.add_kernel("llama-tiny.rmsnorm", "rmsnorm", model="llama-tiny", branch=ws.branch_name("llama-tiny.rmsnorm"),
                             base_commit=base, dtype="float32")
        sha = ws.advance("llama-tiny.rmsnorm", better, "kept", base)
        run = store.create_run("loop", model="llama-tiny")
        store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", proposer="baseline",
                             status="baseline", commit=base, latency_us=900.0, device="cpu x86_64")
        store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", proposer="search", status="kept",
                             commit=sha, latency_us=612.345, device="cpu x86_64")
        store.add_kernel("llama-tiny.softmax", "softmax", model="llama-tiny")
        store.add_kernel("gpt2-tiny.softmax", "softmax", model="gpt2-tiny")
    return better, sha


def test_show_prints_the_best_kept_version_by_its_short_name(kept_kernel, run_cli):
    better, sha = kept_kernel
    code, out, err = run_cli("show", "rmsnorm")
    assert code == 0, err
    assert out == better
    assert err.strip() == (f"# llama-tiny.rmsnorm (rmsnorm, triton): experiment 2 of run 1 ({sha[:10]}, kept); "
                           "612.3 us (CPU timing)")
    code, out, err = run_cli("show", "llama-tiny.rmsnorm", "--experiment", "1")
    assert code == 0 and out == starter_path("rmsnorm", "triton").read_text()
    assert "its starting kernel" in err


def test_an_ambiguous_or_unknown_short_name_lists_the_names(kept_kernel, run_cli):
    code, _, err = run_cli("show", "softmax")
    assert code == NotFoundError.exit_code
    assert "'softmax' fits 2 kernels: gpt2-tiny.softmax, llama-tiny.softmax" in err
    code, _, err = run_cli("export", "nosuch", "--repo-id", "me/x")
    assert code == NotFoundError.exit_code
    assert "kernel 'nosuch' not found" in err and "llama-tiny.rmsnorm" in err


def test_export_accepts_an_unambiguous_short_name(kept_kernel, run_cli, tmp_path):
    better, _ = kept_kernel
    code, out, err = run_cli("export", "rmsnorm", "--repo-id", "me/ak-rms", "--out", str(tmp_path / "x"))
    assert code == 0, err
    assert "exported llama-tiny.rmsnorm" in out
    shipped = better.replace("from autokernel.kernels.launcher import ", "from ._launcher import ")
    assert (tmp_path / "x" / "torch-ext" / "ak_rms" / "_kernel.py").read_text() == shipped


# -- the run's log (9: logs/ was always empty) ------------------------------------------------


def test_every_event_of_a_run_goes_to_its_log(home, tmp_path):
    from autokernel.cli.runlog import RunLog
    from autokernel.loop import LoopEvent

    log = RunLog(home.logs, "loop")
    log(LoopEvent("stage", "profiling llama-tiny (nothing in the store for it yet)"))  # before the run exists
    log(LoopEvent("state", "", {"experiments": 0}, run_id=7))
    log(LoopEvent("done", "#2 llama-tiny.rmsnorm: kept", run_id=7))
    log.close()
    assert log.path == home.logs / "loop-run7.log"
    lines = log.path.read_text().splitlines()
    assert [line.split(None, 3)[2:] for line in lines] == [
        ["stage", "profiling llama-tiny (nothing in the store for it yet)"], ["done", "#2 llama-tiny.rmsnorm: kept"]]
    again = RunLog(home.logs, "loop")  # a resumed run appends
    again(LoopEvent("stage", "resumed", run_id=7))
    again.close()
    assert len(log.path.read_text().splitlines()) == 3


def test_json_output_is_still_json(home, run_cli):
    """The unbounded width changes nothing in --json output."""
    code, out, _ = run_cli("kb", "list", "--source", "sample", "--json")
    assert code == 0 and json.loads(out)["problems"]


def test_the_live_view_shows_the_library_the_screen_and_why(home):
    """Issue 18: per kernel its best against the library, experiments, keeps and the screen's count;
    above the table the screening rate and why the current kernel was chosen."""
    from rich.console import Console

    from autokernel.cli.loop import Display
    from autokernel.loop import LoopEvent
    from autokernel.orchestrator import Orchestrator
    from autokernel.store import Store

    store = Store(home.db)
    run = store.create_run("loop", model="m")
    k = store.add_kernel("m.rmsnorm", "rmsnorm", model="m", share=0.1)
    per = [{"shape": {"rows": 2048, "cols": 4096}, "weight": 64, "latency_us": 8.0, "eager_us": 12.0, "compile_us": 10.0}]
    common = dict(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", duration_s=1.0)
    store.add_experiment(**common, proposer="baseline", status="baseline", latency_us=512.0, speedup_vs_eager=1.5,
                         details_json=json.dumps(per))
    store.add_experiment(**common, proposer="search", status="screened", screen_us=30.0, screen_best_us=8.0)
    store.add_experiment(**common, proposer="search", status="reverted", screen_us=8.5, screen_best_us=8.0,
                         latency_us=530.0)
    orch = Orchestrator.from_store(store, run.id, [k])
    snap = orch.snapshot()
    snap.update(run_id=run.id, experiments=2, duplicates=1)
    snap["kernels"][0]["rejected"] = 3
    display = Display(live=False)
    display(LoopEvent("state", "", snap))
    orch.pick()
    display(LoopEvent("schedule", orch.reason))
    console = Console(width=200, record=True)
    console.print(display.render())
    text = console.export_text()
    assert "screen: 1 of 2 candidates stopped (50%), 3 invalid before compiling, 1 repeats skipped" in text
    assert "why: m.rmsnorm (1.25x the library, 10% of the model)" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("│ m.rmsnorm") or "m.rmsnorm  " in line)
    assert "1.25" in row and "1/2 +3 invalid" in row


def test_the_live_view_counts_the_pairs(home):
    """A near miss timed back to back with the best (autokernel/paired.py) shows in the live view:
    the pairs above the table, and a keep that came from one beside the kernel's keeps."""
    from rich.console import Console

    from autokernel.cli.loop import Display
    from autokernel.loop import LoopEvent
    from autokernel.orchestrator import Orchestrator
    from autokernel.paired import decide
    from autokernel.store import Store

    store = Store(home.db)
    run = store.create_run("loop", model="m")
    k = store.add_kernel("m.rmsnorm", "rmsnorm", model="m", share=0.1)
    common = dict(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", duration_s=1.0)
    store.add_experiment(**common, proposer="baseline", status="baseline", latency_us=512.0)
    yes = decide([10.0, 10.1, 9.9, 10.0], [9.8, 9.9, 9.7, 9.8])
    no = decide([10.0, 10.1, 9.9, 10.0], [10.0, 10.0, 10.0, 10.0])
    assert yes.faster and not no.faster
    store.add_experiment(**common, proposer="search", status="kept", latency_us=505.0,
                         paired_json=json.dumps(yes.to_dict()))
    store.add_experiment(**common, proposer="search", status="reverted", latency_us=503.0,
                         paired_json=json.dumps(no.to_dict()))
    orch = Orchestrator.from_store(store, run.id, [k])
    snap = orch.snapshot()
    assert (snap["kernels"][0]["paired"], snap["kernels"][0]["paired_kept"]) == (2, 1)
    snap.update(run_id=run.id, experiments=2)
    display = Display(live=False)
    display(LoopEvent("state", "", snap))
    console = Console(width=200, record=True)
    console.print(display.render())
    text = console.export_text()
    assert "pairs: 2 near misses timed against the best, 1 kept" in text
    row = next(line for line in text.splitlines() if "m.rmsnorm" in line and "%" in line)
    assert "1 (1 paired)" in row
