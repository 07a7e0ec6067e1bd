"""Experiment reports: results.tsv rows, CSV, JSON, a Markdown summary and the progress plot.

Builds and formats text only; the CLI decides where it goes. Never imports torch (the report
command must start fast), and matplotlib only when a plot is asked for.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from autokernel.amdahl import kernel_speedup, model_speedup
from autokernel.errors import ConfigError, NotFoundError

# results.tsv: the ten autoresearch-style columns first, then ours. Order is a contract.
COLUMNS = (
    "experiment", "tag", "kernel_type", "throughput_tflops", "latency_us", "pct_peak",
    "speedup_vs_pytorch", "correctness", "peak_vram_mb", "description",
    "status", "commit", "speedup_vs_compile", "gbps", "backend", "run",
)
FORMATS = ("tsv", "csv", "json", "md")
# statuses whose numbers a kernel actually achieved (the branch head at some point)
ACHIEVED = ("kept", "baseline")


@dataclass
class ReportRow:
    values: dict[str, Any]  # COLUMNS -> value (None when missing)
    kernel: str  # kernel name, or the type when the experiment has no kernel row
    share: float = 0.0  # the kernel's share of model time (0 when unknown)
    proposer: str = ""  # "baseline" for a kernel's starting point in a run (not counted as an experiment)

    @property
    def starting_point(self) -> bool:
        return self.proposer == "baseline"


def build_rows(store, run_id: Optional[int] = None) -> list[ReportRow]:
    """One row per experiment of `run_id` (or of every run), ordered by run then number."""
    if run_id is not None:
        store.get_run(run_id)  # NotFoundError for an unknown run
    kernels = {k.id: k for k in store.list_kernels()}
    rows = []
    for e in store.list_experiments(run_id=run_id):
        k = kernels.get(e.kernel_id)
        values = {
            "experiment": e.number, "tag": e.tag, "kernel_type": e.kernel_type,
            "throughput_tflops": e.tflops, "latency_us": e.latency_us, "pct_peak": e.pct_peak,
            "speedup_vs_pytorch": e.speedup_vs_eager, "correctness": e.correctness,
            "peak_vram_mb": e.peak_vram_mb, "description": e.description, "status": e.status,
            "commit": e.commit, "speedup_vs_compile": e.speedup_vs_compile, "gbps": e.gbps,
            "backend": e.backend, "run": e.run_id,
        }
        rows.append(ReportRow(values, k.name if k else (e.kernel_type or "?"), k.share if k else 0.0, e.proposer))
    return rows


@dataclass
class LLMUsage:
    """The LLM calls of one run on one kernel (kernel "all": the run's total)."""

    run: Optional[int]
    kernel: str
    model: str  # provider/model, comma-joined when several
    calls: int = 0
    usable: int = 0  # calls whose answer gave at least one candidate
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wait_s: float = 0.0
    cost_usd: Optional[float] = None  # None when no call had a price

    def add(self, c) -> None:
        self.calls += 1
        self.usable += c.status == "ok"
        self.prompt_tokens += c.prompt_tokens or 0
        self.completion_tokens += c.completion_tokens or 0
        self.wait_s += c.latency_s or 0.0
        if c.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + c.cost_usd
        name = f"{c.provider}/{c.model}"
        if name not in self.model.split(", "):
            self.model = ", ".join(m for m in (self.model, name) if m)


def build_llm_usage(store, run_id: Optional[int] = None) -> list[LLMUsage]:
    """Per run: its total, then one entry per kernel (calls with no kernel under "-")."""
    names = {k.id: k.name for k in store.list_kernels()}
    out: dict[tuple, LLMUsage] = {}
    for c in store.list_llm_calls(run_id=run_id, texts=False):
        for key in ((c.run_id, "all"), (c.run_id, names.get(c.kernel_id, "-"))):
            out.setdefault(key, LLMUsage(run=key[0], kernel=key[1], model="")).add(c)
    return sorted(out.values(), key=lambda u: (u.run or 0, u.kernel != "all", u.kernel))


def format_report(rows: list[ReportRow], fmt: str, llm: Optional[list[LLMUsage]] = None) -> str:
    if fmt == "tsv":
        return format_tsv(rows)
    if fmt == "csv":
        return format_csv(rows)
    if fmt == "json":
        return format_json(rows)
    if fmt == "md":
        return format_md(rows, llm)
    raise ConfigError(f"unknown report format {fmt!r}", hint="use one of: " + ", ".join(FORMATS))


# -- the table formats ------------------------------------------------------------------------


def _num(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        text = f"{value:.4f}".rstrip("0").rstrip(".")
        # tiny non-zero values must not print as 0
        return text if text not in ("0", "-0") or value == 0 else f"{value:.3g}"
    return str(value)


def _tsv_escape(text: str) -> str:
    # one line per row, one tab per column: escape what would break either
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def format_tsv(rows: list[ReportRow]) -> str:
    lines = ["\t".join(COLUMNS)]
    for row in rows:
        lines.append("\t".join(_tsv_escape(_num(row.values[c])) for c in COLUMNS))
    return "\n".join(lines) + "\n"


def format_csv(rows: list[ReportRow]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow([_num(row.values[c]) for c in COLUMNS])
    return buf.getvalue()


def format_json(rows: list[ReportRow]) -> str:
    def clean(v):
        # JSON has no NaN/inf: a missing measurement is null either way
        return None if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))) else v

    return json.dumps([{c: clean(row.values[c]) for c in COLUMNS} for row in rows], indent=2) + "\n"


# -- the Markdown summary ---------------------------------------------------------------------


@dataclass
class KernelSummary:
    kernel: str
    kernel_type: str
    backend: str
    share: float
    experiments: int  # without its starting points, as the loop counts
    kept: int
    failed: int  # incorrect, crashed, timeout
    best_vs_eager: Optional[float]
    best_vs_compile: Optional[float]
    best_latency_us: Optional[float]
    baseline_latency_us: Optional[float]
    starting_points: int = 0


def summarize(rows: list[ReportRow]) -> list[KernelSummary]:
    """Per kernel, in order of first appearance: counts and the best numbers it achieved."""
    groups: dict[str, list[ReportRow]] = {}
    for row in rows:
        groups.setdefault(row.kernel, []).append(row)
    out = []
    for name, group in groups.items():
        achieved = [r.values for r in group if r.values["status"] in ACHIEVED and r.values["correctness"] != "FAIL"]

        def best(key, pick):
            vals = [v[key] for v in achieved if v[key] is not None]
            return pick(vals) if vals else None

        baselines = [r.values["latency_us"] for r in group
                     if r.values["status"] == "baseline" and r.values["latency_us"] is not None]
        out.append(KernelSummary(
            kernel=name, kernel_type=group[0].values["kernel_type"], backend=group[0].values["backend"],
            share=group[0].share, experiments=sum(not r.starting_point for r in group),
            starting_points=sum(r.starting_point for r in group),
            kept=sum(r.values["status"] == "kept" for r in group),
            failed=sum(r.values["status"] in ("incorrect", "crashed", "timeout") for r in group),
            best_vs_eager=best("speedup_vs_pytorch", max), best_vs_compile=best("speedup_vs_compile", max),
            best_latency_us=best("latency_us", min), baseline_latency_us=baselines[0] if baselines else None,
        ))
    return out


def amdahl(summaries: list[KernelSummary]) -> Optional[float]:
    """The model speed-up predicted from each kernel's share and best speed-up, by the rule the loop
    and verify use (autokernel.amdahl); None when no kernel has a share and a timed experiment."""
    terms = [(s.share, kernel_speedup(s.best_vs_eager, s.baseline_latency_us, s.best_latency_us))
             for s in summaries if s.share > 0 and (s.best_vs_eager or s.best_latency_us)]
    if not terms:
        return None
    speedup = model_speedup(terms)
    return speedup if math.isfinite(speedup) else None


def _x(value: Optional[float], suffix: str = "x") -> str:
    return "–" if value is None else f"{value:.2f}{suffix}"


def format_md(rows: list[ReportRow], llm: Optional[list[LLMUsage]] = None) -> str:
    if not rows:
        return "# AutoKernel report\n\nNo experiments recorded yet.\n" + llm_md(llm)
    summaries = summarize(rows)
    runs = sorted({r.values["run"] for r in rows if r.values["run"] is not None})
    lines = ["# AutoKernel report", ""]
    if runs:
        lines += [f"Run{'s' if len(runs) > 1 else ''}: {', '.join(str(r) for r in runs)}", ""]
    lines += [
        "| kernel | type | backend | share | experiments | kept | failed | best vs eager | best vs compile "
        "| best latency (us) | baseline (us) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        share = f"{100 * s.share:.1f}%" if s.share else "–"
        best_lat = "–" if s.best_latency_us is None else _num(s.best_latency_us)
        base_lat = "–" if s.baseline_latency_us is None else _num(s.baseline_latency_us)
        lines.append(f"| {_md_cell(s.kernel)} | {s.kernel_type} | {s.backend} | {share} | {s.experiments} | {s.kept} "
                     f"| {s.failed} | {_x(s.best_vs_eager)} | {_x(s.best_vs_compile)} | {best_lat} | {base_lat} |")
    total = sum(s.experiments for s in summaries)
    starts = sum(s.starting_points for s in summaries)
    kept = sum(s.kept for s in summaries)
    overall = f"{total} experiment{'s' if total != 1 else ''}" + \
              (f" (+{starts} starting point{'s' if starts != 1 else ''})" if starts else "") + \
              f" on {len(summaries)} kernel{'s' if len(summaries) != 1 else ''}, {kept} kept"
    best = max((s for s in summaries if s.best_vs_eager), key=lambda s: s.best_vs_eager, default=None)
    if best is not None:
        overall += f"; best speed-up vs eager PyTorch {_x(best.best_vs_eager)} ({best.kernel})"
    model = amdahl(summaries)
    if model is not None:
        overall += f"; estimated model speed-up (Amdahl, from profile shares) {_x(model)}"
    lines += ["", overall + ".", ""]
    return "\n".join(lines) + llm_md(llm)


def llm_md(usage: Optional[list[LLMUsage]]) -> str:
    """The LLM section: calls, tokens, latency (time waited, retries included) and cost per run (its
    total first) and per kernel."""
    if not usage:
        return ""
    lines = ["", "## LLM calls", "",
             "| run | kernel | model | calls | usable | prompt tokens | completion tokens | latency (s) | cost (USD) |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for u in usage:
        cost = "–" if u.cost_usd is None else f"{u.cost_usd:.4f}"
        kernel = "**all**" if u.kernel == "all" else _md_cell(u.kernel)
        lines.append(f"| {u.run if u.run is not None else '–'} | {kernel} | {_md_cell(u.model)} | {u.calls} | "
                     f"{u.usable} | {u.prompt_tokens} | {u.completion_tokens} | {u.wait_s:.1f} | {cost} |")
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _ms(value: Optional[float]) -> str:
    return "–" if value is None else f"{value:.3f}"


def workloads_md(verify: dict[str, Any]) -> str:
    """The model at its workloads (a verify result's `workloads`): per workload and mode the time
    without and with AutoKernel, the kernels it used there, graph breaks / recompiles, and the
    headline, best with over best without."""
    loads = verify.get("workloads") or []
    if not loads:
        return ""
    lines = [f"## {verify.get('model', 'the model')} where users run it ({verify.get('device', '')}, "
             f"{verify.get('dtype', '')})", "",
             "| workload | mode | without (ms) | with AutoKernel (ms) | speed-up | kernels used | wall without / with "
             "(ms) | graph breaks / recompiles | note |",
             "|---|---|---:|---:|---:|---|---:|---:|---|"]
    for w in loads:
        if not w.get("rows"):
            lines.append(f"| {w['workload']} | – | – | – | – | – | – | – | {_md_cell(w.get('error') or '')} |")
            continue
        for r in w["rows"]:
            wo, wi = r.get("without"), r.get("with_")
            x = wo["ms"] / wi["ms"] if wo and wi else None
            walls = f"{_ms(wo and wo.get('wall_ms'))} / {_ms(wi and wi.get('wall_ms'))}"
            gb = "–" if r.get("graph_breaks") is None else f"{r['graph_breaks']} / {r['recompiles']}"
            used = ", ".join(r.get("kernels") or []) or "–"
            routes = [t for t in r.get("routes") or [] if t not in (r.get("kernels") or [])]
            if routes:  # installed, their kernels declining: the route itself changes the graph
                used += f" (route: {', '.join(routes)})"
            lines.append(f"| {w['workload']} | {r['mode']} | {_ms(wo and wo['ms'])} | {_ms(wi and wi['ms'])} "
                         f"| {_x(x, 'x') if x is None else f'{x:.3f}x'} | {used} "
                         f"| {walls} | {gb} | {_md_cell(r.get('note') or '')} |")
    lines += ["", "| workload | best without | best with AutoKernel | speed-up |", "|---|---|---|---:|"]
    for w in loads:
        bw, bk = w.get("best_without"), w.get("best_with")
        if bw and bk:
            lines.append(f"| {w['workload']} | {bw[1]:.3f} ms ({bw[0]}) | {bk[1]:.3f} ms ({bk[0]}) "
                         f"| **{bw[1] / bk[1]:.3f}x** |")
    return "\n".join(lines) + "\n"


# -- the progress plot ------------------------------------------------------------------------


@dataclass
class Plotted:
    """What plot_progress drew, for the CLI to say."""

    path: Path
    basis: str  # "eager": speed-up over eager PyTorch | "start": over each kernel's start | "none"
    points: int  # experiments drawn
    note: str  # one line on what the y axis is (or why nothing is drawn)


START_NOTE = ("speed-up over each kernel's starting kernel: these experiments have no eager timing "
              "(CPU timings under the Triton interpreter), so they are compared with their start")


def _speedups(rows: list[ReportRow]) -> tuple[str, dict[int, float]]:
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


def plot_progress(rows: list[ReportRow], path: str | Path, title: str = "AutoKernel progress") -> Plotted:
    """Speed-up over experiment number, one colour per kernel: kept experiments marked, the others
    faint, and each kernel's running best as a step line. Written as PNG. The speed-up is over eager
    PyTorch where the experiments timed it, else over each kernel's start (a CPU run), and the axis
    says which; with no timings at all the picture says why it is empty."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    basis, speedup = _speedups(rows)
    several_runs = len({r.values["run"] for r in rows}) > 1
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110)
    try:
        groups: dict[str, list[tuple[int, int, ReportRow]]] = {}
        for i, row in enumerate(rows):
            x = i + 1 if several_runs else (row.values["experiment"] or i + 1)
            groups.setdefault(row.kernel, []).append((x, i, row))
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
                # running best: the branch head's speed-up after each experiment
                xs, ys, best = [], [], None
                for x, y, r in measured:
                    if r.values["status"] in ACHIEVED and (best is None or y > best):
                        best = y
                    if best is not None:
                        xs.append(x)
                        ys.append(best)
                ax.step(xs, ys, where="post", color=colour, linewidth=1.6, alpha=0.9)
        if not rows:
            note = "no experiments yet"
        elif basis == "none":
            note = "nothing to plot: no experiment has a timing (every one failed or was not timed)"
        else:
            note = "speed-up vs eager PyTorch" if basis == "eager" else START_NOTE
        if basis == "none":
            ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes, wrap=True)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlabel("experiment (all runs, in order)" if several_runs else "experiment")
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


def latest_workloads_md(store, run_id: Optional[int] = None) -> str:
    """workloads_md of the newest verify run (of the given run's model); "" when there is none."""
    model = store.get_run(run_id).model if run_id is not None else None
    runs = [r for r in store.list_runs() if r.kind == "verify" and r.notes and (model is None or r.model == model)]
    for r in sorted(runs, key=lambda r: r.id, reverse=True):
        try:
            data = json.loads(r.notes)
        except ValueError:
            continue
        if data.get("workloads"):
            return workloads_md(data)
    return ""


def missing_run(run_id: int) -> NotFoundError:
    return NotFoundError(f"run {run_id} not found", hint="`autokernel report` without --run lists every run")
