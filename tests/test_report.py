"""`autokernel report` on a real store: every format, filtering by run, the plot, no torch import."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from akfixtures import DESC, fill_store, pythonpath

from autokernel.errors import NotFoundError
from autokernel.report import COLUMNS, amdahl, build_rows, format_md, format_tsv, summarize
from autokernel.store import Store

ROOT = Path(__file__).resolve().parents[1]
HEADER = ("experiment\ttag\tkernel_type\tthroughput_tflops\tlatency_us\tpct_peak\tspeedup_vs_pytorch\tcorrectness\t"
          "peak_vram_mb\tdescription\tstatus\tcommit\tspeedup_vs_compile\tgbps\tbackend\trun")



@pytest.fixture
def filled(home):
    ids = fill_store(home.db)
    return home, ids


def test_tsv_columns_rows_and_escaping(filled, run_cli):
    home, ids = filled
    code, out, err = run_cli("report")
    assert code == 0, err
    lines = out.split("\n")
    assert lines[0] == HEADER and lines[-1] == ""
    rows = [line.split("\t") for line in lines[1:-1]]
    assert len(rows) == 7 and all(len(r) == 16 for r in rows)
    by_tag = {r[1]: dict(zip(COLUMNS, r)) for r in rows}
    kept = by_tag["rmsnorm-e2"]
    assert kept == {
        "experiment": "2", "tag": "rmsnorm-e2", "kernel_type": "rmsnorm", "throughput_tflops": "0.3125",
        "latency_us": "80", "pct_peak": "24.375", "speedup_vs_pytorch": "1.25", "correctness": "PASS",
        "peak_vram_mb": "12", "description": "block 256\\twith a tab\\nand a newline", "status": "kept",
        "commit": "b" * 40, "speedup_vs_compile": "1", "gbps": "1125", "backend": "triton", "run": str(ids["run1"]),
    }
    broken = by_tag["rmsnorm-e4"]
    assert broken["latency_us"] == "" and broken["speedup_vs_pytorch"] == "" and broken["correctness"] == "FAIL"
    assert by_tag["reduce-e1"]["run"] == str(ids["run2"]) and by_tag["reduce-e1"]["backend"] == "cuda"
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5", "6", "1"]


def test_run_filter_and_unknown_run(filled, run_cli):
    home, ids = filled
    code, out, _ = run_cli("report", "--run", str(ids["run2"]))
    assert code == 0
    assert out.splitlines()[1:] == ["1\treduce-e1\treduce\t\t\t\t\tERROR\t\tillegal memory access\tcrashed\t\t\t\tcuda\t"
                                    + str(ids["run2"])]
    code, out, err = run_cli("report", "--run", "99")
    assert code == NotFoundError.exit_code and out == ""
    assert err.strip().count("\n") == 0 and "run 99 not found" in err
    with Store(home.db) as store, pytest.raises(NotFoundError):
        build_rows(store, 99)


def test_csv_matches_tsv(filled, run_cli):
    _, out_tsv, _ = run_cli("report", "--format", "tsv")
    code, out_csv, _ = run_cli("report", "--format", "csv")
    assert code == 0
    parsed = list(csv.reader(io.StringIO(out_csv)))
    assert tuple(parsed[0]) == COLUMNS
    tsv_rows = [line.split("\t") for line in out_tsv.splitlines()[1:]]
    assert len(parsed) - 1 == len(tsv_rows) == 7
    for c_row, t_row in zip(parsed[1:], tsv_rows):
        c = dict(zip(COLUMNS, c_row))
        t = dict(zip(COLUMNS, t_row))
        assert {k: v for k, v in c.items() if k != "description"} == {k: v for k, v in t.items() if k != "description"}
    assert parsed[2][COLUMNS.index("description")] == DESC  # CSV quotes instead of escaping


def test_json_numbers_and_nulls(filled, run_cli, tmp_path):
    target = tmp_path / "out" / "results.json"
    code, out, err = run_cli("report", "--format", "json", "--output", str(target))
    assert code == 0 and out == "" and "wrote 7 experiments" in err
    data = json.loads(target.read_text())
    assert len(data) == 7 and all(list(d) == list(COLUMNS) for d in data)
    kept = data[1]
    assert kept["experiment"] == 2 and kept["speedup_vs_pytorch"] == 1.25 and kept["latency_us"] == 80.0
    assert kept["description"] == DESC and kept["run"] == 1
    assert data[3]["latency_us"] is None and data[3]["throughput_tflops"] is None


def test_markdown_summary(filled, run_cli):
    code, out, _ = run_cli("report", "--format", "md")
    assert code == 0
    rms = next(line for line in out.splitlines() if line.startswith("| llama.rmsnorm"))
    cells = [c.strip() for c in rms.strip("|").split("|")]
    # kernel, type, backend, share, experiments, kept, failed, vs eager, vs compile, best latency, baseline,
    # screened out (none screened here)
    assert cells == ["llama.rmsnorm", "rmsnorm", "triton", "10.0%", "4", "1", "1", "1.25x", "1.00x", "80", "100", "–"]
    # each kernel's history: its start and its keeps, in order
    history = out[out.index("## History of each kernel"):]
    rms_history = history[history.index("### llama.rmsnorm (4 experiments)"):history.index("### llama.softmax")]
    assert [line.split("|")[4].strip() for line in rms_history.splitlines() if line.startswith("| ")][1:] == \
        ["baseline", "kept"]
    sm = next(line for line in out.splitlines() if line.startswith("| llama.softmax"))
    assert "2.00x" in sm and "1.50x" in sm
    assert "| reduce |" in out  # an experiment without a kernel row is grouped by its type
    # 1 / (1 - (0.10 * (1 - 1/1.25) + 0.05 * (1 - 1/2))) = 1 / 0.955
    assert "7 experiments on 3 kernels, 2 kept" in out and "(Amdahl, from profile shares) 1.05x" in out


def test_screening_is_counted(home):
    """The report says how many candidates the screen stopped, how many of those were 3x slower than
    the best or worse, and how many that slow still got the full judgement."""
    with Store(home.db) as store:
        run = store.create_run("loop", model="m")
        k = store.add_kernel("m.rmsnorm", "rmsnorm", model="m", share=0.2)
        common = dict(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm")
        store.add_experiment(**common, proposer="baseline", status="baseline", latency_us=100.0, duration_s=30.0)
        for screen_us, status in ((400.0, "screened"), (130.0, "screened"), (310.0, "screened"), (90.0, "kept")):
            store.add_experiment(**common, proposer="search", status=status, screen_us=screen_us, screen_best_us=100.0,
                                 latency_us=screen_us if status == "kept" else None, duration_s=1.0)
        store.add_experiment(**common, proposer="search", status="reverted", latency_us=300.0, duration_s=20.0)
        md = format_md(build_rows(store, run.id))
    (s,) = summarize(build_rows(Store(home.db), run.id))
    assert (s.screened, s.screened_out, s.stopped_slow, s.judged_slow) == (4, 3, 2, 1)
    assert "Screening: 3 of 4 screened candidates stopped before the full judgement, 2 of them 3x the best's time " \
           "or slower; fully judged at 3x the best or slower: 1." in md
    assert "| 3/4 |" in md


def test_pairs_are_listed_and_a_paired_keep_is_marked(home):
    """A near miss's pair (autokernel/paired.py) is in the report: its rounds, ratio, bound and
    verdict, and a keep that came from it says so in the kernel's history."""
    import json as _json

    from autokernel.paired import decide

    with Store(home.db) as store:
        run = store.create_run("loop", model="m")
        k = store.add_kernel("m.rmsnorm", "rmsnorm", model="m", share=0.2)
        common = dict(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm")
        store.add_experiment(**common, proposer="baseline", status="baseline", latency_us=100.0, duration_s=30.0)
        kept = decide([100.0, 101.0, 99.5, 100.2, 100.8, 99.9], [98.4, 99.5, 97.9, 98.7, 99.1, 98.3])
        same = decide([100.0, 101.0, 99.5, 100.2, 100.8, 99.9], [100.3, 100.6, 99.2, 100.5, 100.4, 100.1])
        assert kept.faster and not same.faster
        store.add_experiment(**common, proposer="search", status="kept", latency_us=99.3, duration_s=12.0,
                             description="TILE_ELEMS=8192", paired_json=_json.dumps(kept.to_dict()))
        store.add_experiment(**common, proposer="search", status="reverted", latency_us=99.5, duration_s=12.0,
                             description="MAX_WARPS=8", paired_json=_json.dumps(same.to_dict()))
        md = format_md(build_rows(store, run.id))
    assert "Pairs: 2 near misses timed back to back with the best, 1 kept on the pair's verdict." in md
    assert f"| 2 | m.rmsnorm | 6 | {kept.ratio:.4f} | {kept.upper:.4f} | faster |" in md
    assert f"| 3 | m.rmsnorm | 6 | {same.ratio:.4f} | {same.upper:.4f} | not faster with 99% confidence |" in md
    assert "| kept (paired) | 99.3 |" in md


def test_summary_and_amdahl_values(filled):
    home, ids = filled
    with Store(home.db) as store:
        rows = build_rows(store, ids["run1"])
    summaries = {s.kernel: s for s in summarize(rows)}
    assert summaries["llama.rmsnorm"].best_latency_us == 80.0  # the reverted 90us and failed row do not count
    assert summaries["llama.softmax"].kept == 1 and summaries["llama.softmax"].experiments == 2
    assert amdahl(list(summaries.values())) == pytest.approx(1 / 0.955)


def test_empty_store_every_format(home, run_cli):
    for fmt, expected in (("tsv", HEADER + "\n"), ("csv", ",".join(COLUMNS) + "\n"), ("json", "[]\n")):
        code, out, _ = run_cli("report", "--format", fmt)
        assert (code, out) == (0, expected), fmt
    code, out, _ = run_cli("report", "--format", "md")
    assert code == 0 and "No experiments recorded yet." in out
    assert not home.db.exists()  # reporting created no database
    assert format_tsv([]) == HEADER + "\n" and "No experiments" in format_md([])


def test_bad_format_is_a_usage_error(home, run_cli):
    code, _, _ = run_cli("report", "--format", "xml")
    assert code == 2


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_written_as_png(filled, run_cli, tmp_path):
    home, ids = filled
    plot = tmp_path / "plots" / "progress.png"
    code, out, err = run_cli("report", "--run", str(ids["run1"]), "--plot", str(plot))
    assert code == 0 and "plot written" in err
    assert out.startswith(HEADER)
    w, h = _png_size(plot)
    assert (w, h) == (1100, 605)
    # the picture is not blank: count distinct colours in the raw image via matplotlib's reader
    import matplotlib.image as mpimg

    img = mpimg.imread(plot)
    assert len({tuple(px) for px in img.reshape(-1, img.shape[-1])[::7].tolist()}) > 20


def test_plot_of_empty_store(home, run_cli, tmp_path):
    plot = tmp_path / "empty.png"
    code, _, _ = run_cli("report", "--plot", str(plot))
    assert code == 0 and _png_size(plot) == (1100, 605)


def test_report_command_does_not_import_torch(tmp_path):
    fill_env = {**os.environ, "PYTHONPATH": pythonpath(ROOT, ROOT / "tests"),
                "AUTOKERNEL_HOME": str(tmp_path / "home")}
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from akfixtures import fill_store\n"
            "Path(sys.argv[1]).mkdir(parents=True)\n"
            "fill_store(Path(sys.argv[1]) / 'autokernel.db')\n"
            "from autokernel.cli.app import main\n"
            "for fmt in ('tsv', 'md'):\n"
            "    try:\n"
            "        main(['report', '--format', fmt])\n"
            "    except SystemExit as exc:\n"
            "        assert not exc.code, exc.code\n"
            "print('TORCH', 'torch' in sys.modules, file=sys.stderr)\n")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "home")], capture_output=True, text=True,
                         env=fill_env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "TORCH False" in res.stderr
    assert res.stdout.startswith(HEADER) and "llama.rmsnorm" in res.stdout


def _cpu_run(db: Path) -> int:
    """A loop run as the CPU records it: latencies (CPU timings), no speed-up over eager; each
    kernel's start is a baseline row of the run."""
    with Store(db) as store:
        run = store.create_run("loop", model="llama-tiny")
        for name, share, start, later in (("llama-tiny.rmsnorm", 0.2, 500.0, (450.0, 520.0, 400.0)),
                                          ("llama-tiny.softmax", 0.1, 300.0, (310.0,))):
            k = store.add_kernel(name, name.split(".")[1], model="llama-tiny", share=share)
            common = dict(run_id=run.id, kernel_id=k.id, kernel_type=k.kernel_type, correctness="PASS")
            store.add_experiment(**common, proposer="baseline", status="baseline", latency_us=start)
            best = start
            for lat in later:
                kept = lat < best
                best = min(best, lat)
                store.add_experiment(**common, proposer="search", status="kept" if kept else "reverted", latency_us=lat)
        k = store.get_kernel("llama-tiny.softmax")
        store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="softmax", proposer="search", status="crashed",
                             correctness="ERROR")
    return run.id


def test_a_cpu_run_is_plotted_against_each_kernels_start(home, run_cli, tmp_path):
    from autokernel.report_plot import plot_progress

    run_id = _cpu_run(home.db)
    with Store(home.db) as store:
        rows = build_rows(store, run_id)
    drawn = plot_progress(rows, tmp_path / "cpu.png")
    # every timed row is a point: 2 starts, 4 later experiments (the crashed one has no timing)
    assert (drawn.basis, drawn.points) == ("start", 6)
    assert "CPU timings" in drawn.note and "starting kernel" in drawn.note
    code, _, err = run_cli("report", "--run", str(run_id), "--plot", str(tmp_path / "cli.png"))
    assert code == 0 and "CPU timings" in err
    import matplotlib.image as mpimg

    img = mpimg.imread(tmp_path / "cli.png")
    assert len({tuple(px) for px in img.reshape(-1, img.shape[-1])[::7].tolist()}) > 20


def test_a_plot_without_any_timing_says_why(home, run_cli, tmp_path):
    with Store(home.db) as store:
        run = store.create_run("loop", model="m")
        store.add_experiment(run_id=run.id, kernel_type="softmax", status="crashed", correctness="ERROR")
    code, _, err = run_cli("report", "--plot", str(tmp_path / "none.png"))
    assert code == 0 and "nothing to plot: no experiment has a timing" in err


def test_the_report_counts_experiments_as_the_loop_does(home):
    """Starting points are not experiments in either: the loop's summary and the report agree."""
    from autokernel.loop import summarize as loop_summary

    run_id = _cpu_run(home.db)
    with Store(home.db) as store:
        loop = loop_summary(store, run_id)
        md = format_md(build_rows(store, run_id))
    assert (loop.experiments, loop.starting_points, loop.kept) == (5, 2, 2)
    assert "5 experiments (+2 starting points) on 2 kernels, 2 kept" in md
    rms = next(line for line in md.splitlines() if line.startswith("| llama-tiny.rmsnorm"))
    assert [c.strip() for c in rms.strip("|").split("|")][4:6] == ["3", "2"]


def test_the_plot_runs_over_wall_time(home, tmp_path):
    """--plot: x is the wall time the run spent when each experiment finished (durations added up)."""
    from autokernel.report_plot import plot_progress, wall_minutes

    with Store(home.db) as store:
        run = store.create_run("loop", model="m")
        k = store.add_kernel("m.softmax", "softmax", model="m", share=0.3)
        common = dict(run_id=run.id, kernel_id=k.id, kernel_type="softmax")
        for status, lat, dur in (("baseline", 100.0, 60.0), ("screened", None, 1.5), ("kept", 80.0, 58.5),
                                 ("reverted", 90.0, 120.0)):
            store.add_experiment(**common, proposer="baseline" if status == "baseline" else "search", status=status,
                                 latency_us=lat, duration_s=dur)
        rows = build_rows(store, run.id)
    timed, xs = wall_minutes(rows)
    assert timed and xs == [1.0, 1.025, 2.0, 4.0]
    drawn = plot_progress(rows, tmp_path / "wall.png")
    assert (drawn.basis, drawn.points) == ("start", 3) and (tmp_path / "wall.png").stat().st_size > 10_000
