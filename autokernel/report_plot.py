"""`report --plot`: each kernel's best-so-far speed-up over the run's wall time, as a PNG.

The x axis is the time the runs spent, summed from the experiments' durations in order (a run
resumed later continues where it stopped; several runs are laid end to end), so a loop that finds
its gains early shows it; rows without a recorded duration fall back to their order. The y axis
is the speed-up over eager PyTorch where the experiments timed it (a GPU run), else over each
kernel's starting kernel (CPU timings), and says which. matplotlib is imported only here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autokernel.report import ACHIEVED, ReportRow


@dataclass
class Plotted:
    """What plot_progress drew, for the CLI to say."""

    path: Path
    basis: str  # "eager": speed-up over eager PyTorch | "start": over each kernel's start | "none"
    points: int  # experiments drawn
    note: str  # one line on what the y axis is (or why nothing is drawn)


START_NOTE = ("speed-up over each kernel's starting kernel: these experiments have no eager timing "
              "(CPU timings under the Triton interpreter), so they are compared with their start")


def speedups(rows: list[ReportRow]) -> tuple[str, dict[int, float]]:
    """(basis, row index -> speed-up) for the plot: over eager where measured (a GPU run), else over
    the kernel's starting point (what a CPU run measures), else nothing."""
    eager = {i: r.values["speedup_vs_pytorch"] for i, r in enumerate(rows)
             if r.values["speedup_vs_pytorch"] is not None}
    if eager:
        return "eager", eager
    start: dict[str, float] = {}
    for r in rows:
        if r.values["status"] == "baseline" and r.values["latency_us"] and r.kernel not in start:
            start[r.kernel] = r.values["latency_us"]
    vs_start = {i: start[r.kernel] / r.values["latency_us"] for i, r in enumerate(rows)
                if r.kernel in start and r.values["latency_us"]}
    return ("start", vs_start) if vs_start else ("none", {})


def wall_minutes(rows: list[ReportRow]) -> tuple[bool, list[float]]:
    """(timed, x of each row): minutes of wall time spent when each row finished, or its index."""
    if not any(r.duration_s for r in rows):
        return False, [float(i + 1) for i in range(len(rows))]
    total, xs = 0.0, []
    for r in rows:
        total += float(r.duration_s or 0.0)
        xs.append(total / 60.0)
    return True, xs


def plot_progress(rows: list[ReportRow], path: str | Path, title: str = "AutoKernel progress") -> Plotted:
    """Speed-up over wall time, one colour per kernel: kept experiments marked, the others faint,
    and each kernel's best so far as a step line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    basis, speedup = speedups(rows)
    timed, xs = wall_minutes(rows)
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    try:
        groups: dict[str, list[tuple[float, int, ReportRow]]] = {}
        for i, row in enumerate(rows):
            groups.setdefault(row.kernel, []).append((xs[i], i, row))
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for idx, (name, pts) in enumerate(groups.items()):
            colour = colours[idx % len(colours)]
            measured = [(x, speedup[i], r) for x, i, r in pts if i in speedup]
            faint = [(x, y) for x, y, r in measured if r.values["status"] not in ACHIEVED]
            kept = [(x, y) for x, y, r in measured if r.values["status"] in ACHIEVED]
            if faint:
                ax.scatter(*zip(*faint), s=14, color=colour, alpha=0.25, linewidths=0)
            if kept:
                ax.scatter(*zip(*kept), s=46, color=colour, edgecolors="black", linewidths=0.7, zorder=3,
                           label=f"{name} (kept)")
                # best so far: the branch head's speed-up after each experiment, to the kernel's last one
                steps, best = [], None
                for x, _i, r in pts:
                    y = speedup.get(_i)
                    if y is not None and r.values["status"] in ACHIEVED and (best is None or y > best):
                        best = y
                    if best is not None:
                        steps.append((x, best))
                ax.step(*zip(*steps), where="post", color=colour, linewidth=1.6, alpha=0.9)
        if not rows:
            note = "no experiments yet"
        elif basis == "none":
            note = "nothing to plot: no experiment has a timing (every one failed or was not timed)"
        else:
            note = "speed-up vs eager PyTorch" if basis == "eager" else START_NOTE
        if basis == "none":
            ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, wrap=True)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("wall time spent (minutes, all runs in order)" if timed else "experiment (in order)")
        ax.set_ylabel("speed-up vs its starting kernel (CPU timings)" if basis == "start"
                      else "speed-up vs eager PyTorch")
        ax.set_title(title if basis != "start" else f"{title}: CPU timings, not GPU speed")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return Plotted(path=path, basis=basis, points=len(speedup), note=note)
