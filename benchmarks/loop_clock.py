"""A loop run's keeps and screens by two clocks: the experiments' own time (their rows' durations)
and the loop's budget clock (which also counts each kernel's starting-point judgement), with the
counts at 10 and 25 minutes of each: issue 18's targets name the budget (`--hours`). Both are sums
of finished rows' durations: the loop's own clock (orchestrator.run_elapsed_s) also counts rows a
killed process abandoned and time spent waiting on an LLM, which this leaves out.

    python benchmarks/loop_clock.py .state/state_run6.tgz     # a state packed by loop_llama7b.sh
    python benchmarks/loop_clock.py ~/.autokernel/autokernel.db --run 3

Reads the store's SQLite file with the standard library only (no torch, no autokernel import), so it
runs anywhere the state was copied to.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tarfile
import tempfile
from collections import Counter

MARKS_S = (600, 1500)


def open_db(path: str) -> sqlite3.Connection:
    if path.endswith((".tgz", ".tar.gz")):
        where = tempfile.mkdtemp(prefix="loop_clock_")
        with tarfile.open(path) as tar:
            tar.extractall(where, filter="data")
        found = [os.path.join(r, f) for r, _, fs in os.walk(where) for f in fs if f == "autokernel.db"]
        if not found:
            sys.exit(f"loop_clock: no autokernel.db in {path}")
        path = found[0]
    return sqlite3.connect(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", help="autokernel.db, or a .tgz holding one")
    ap.add_argument("--run", type=int, default=None, help="the loop run (default: the latest)")
    args = ap.parse_args(argv)
    c = open_db(args.store)
    run = args.run or (c.execute("select id from runs where kind='loop' order by id desc limit 1").fetchone() or [None])[0]
    if run is None:
        sys.exit("loop_clock: no loop run in that store")
    rows = c.execute("select number, kernel_type, proposer, status, duration_s, screen_us, description "
                     "from experiments where run_id = ? and status != 'abandoned' order by number", (run,)).fetchall()
    exp_s = budget_s = 0.0
    n = kept = screened = 0
    marks: dict[tuple[str, int], tuple[int, int, int]] = {}
    durations, by_kernel = [], Counter()
    for num, kernel, proposer, status, dur, screen, desc in rows:
        dur = dur or 0.0
        budget_s += dur
        if proposer == "baseline":
            print(f"start of {kernel}: judged in {dur:.1f} s")
            continue
        exp_s += dur
        n += 1
        durations.append(dur)
        screened += screen is not None
        by_kernel[(kernel, status)] += 1
        if status == "kept":
            kept += 1
            print(f"kept #{num} {kernel} at {exp_s / 60:.2f} min of experiments, {budget_s / 60:.2f} min of budget: "
                  f"{desc[:100]}")
        for lim in MARKS_S:
            for clock, t in (("experiment", exp_s), ("budget", budget_s)):
                if t <= lim:
                    marks[(clock, lim)] = (n, screened, kept)
    print(f"run {run}: {n} experiments, {kept} kept; {exp_s / 60:.2f} min of experiments, {budget_s / 60:.2f} min of "
          f"budget; median experiment {statistics.median(durations) if durations else 0:.2f} s")
    for (clock, lim), (e, s, k) in sorted(marks.items()):
        if lim <= budget_s + 60:
            print(f"  at {lim // 60} min of the {clock} clock: {e} experiments, {s} screened, {k} kept")
    for (kernel, status), count in sorted(by_kernel.items()):
        print(f"  {kernel} {status}: {count}")
    if "paired_json" in {r[1] for r in c.execute("pragma table_info(experiments)")}:  # stores from 0008 on
        for num, kernel, status, raw in c.execute("select number, kernel_type, status, paired_json from experiments "
                                                  "where run_id = ? and paired_json is not null order by number",
                                                  (run,)):
            v = json.loads(raw)
            ratio = f"{v['ratio']:.4f}x (99% bound {v['upper']:.4f})" if v.get("ratio") else "no ratio"
            print(f"  paired #{num} {kernel}: {status}; {ratio}: {v.get('reason')} in {v.get('seconds', 0):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
