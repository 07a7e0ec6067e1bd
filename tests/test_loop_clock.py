"""benchmarks/loop_clock.py: a run's keeps by the experiments' clock and by the budget clock (which
also counts the starting points' judgements), on a real store and a packed state."""

from __future__ import annotations

import importlib.util
import tarfile
from pathlib import Path

from autokernel.store import Store


def _clock():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "loop_clock.py"
    spec = importlib.util.spec_from_file_location("loop_clock", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_counts_keeps_by_both_clocks(home, tmp_path, capsys):
    store = Store(home.db)
    run = store.create_run("loop", model="m")
    k = store.add_kernel("m.rmsnorm", "rmsnorm", model="m", share=0.5)

    def row(status, dur, proposer="search", screen=None):
        store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", status=status, duration_s=dur,
                             proposer=proposer, screen_us=screen, description=f"{status} {dur}")

    row("baseline", 120.0, proposer="baseline")  # two minutes of starts on the budget clock
    for _ in range(9):
        row("screened", 50.0, screen=10.0)  # 450 s of experiments
    row("kept", 100.0, screen=9.0)  # 550 s of experiments, 670 s of budget
    store.close()
    clock = _clock()
    assert clock.main([str(home.db)]) == 0
    out = capsys.readouterr().out
    assert "kept #11 rmsnorm at 9.17 min of experiments, 11.17 min of budget" in out
    assert "at 10 min of the experiment clock: 10 experiments, 10 screened, 1 kept" in out
    assert "at 10 min of the budget clock: 9 experiments, 9 screened, 0 kept" in out
    # the same from a state packed the way loop_llama7b.sh packs AUTOKERNEL_HOME
    tgz = tmp_path / "state.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(home.db, arcname=".autokernel-x/autokernel.db")
    assert clock.main([str(tgz)]) == 0
    assert "1 kept" in capsys.readouterr().out
