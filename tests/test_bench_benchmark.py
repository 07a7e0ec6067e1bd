"""benchmarks/kernels.py on the CPU (--small): a broken/unavailable backend costs its own row, the
RESULTS.md section is written and replaced in place, and several JSON files merge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(400)
def test_benchmark_script_small_run_and_results_section(tmp_path, home):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Kernel library\n\nold text\n\n## Model\n\nkept\n")
    cmd = [sys.executable, str(ROOT / "benchmarks" / "kernels.py"), "--small", "--types", "reduce",
           "--backends", "triton,cuda", "--timeout", "120", "--out", str(tmp_path / "out"), "--results", str(results)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=380, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "out" / "kernels.json").read_text())
    rows = {(r["type"], r["backend"]): r for r in data["rows"]}
    assert rows[("reduce", "triton")]["outcome"] == "correct"
    assert rows[("reduce", "cuda")]["outcome"] == "bench_error"  # no GPU here: its own row, run goes on
    assert data["ceilings"]["copy_gbps"] > 0
    text = results.read_text()
    assert "old text" not in text and text.count("## Kernel library") == 1
    assert "## Model\n\nkept" in text  # other sections untouched
    assert "| reduce | triton |" in text and "SMOKE RUN" in text
    # Re-rendering from two JSON files merges their rows.
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernels.py"), "--from-json",
                           str(tmp_path / "out" / "kernels.json"), str(tmp_path / "out" / "kernels.json"),
                           "--results", str(results)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert results.read_text().count("| reduce | triton |") == 2
