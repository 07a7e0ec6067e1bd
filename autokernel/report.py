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
    duration_s: Optional[float] = None  # wall time the experiment took (the plot's x axis adds them up)
    screen_us: Optional[float] = None  # its time at the heaviest shape, when the screen timed it
    screen_best_us: Optional[float] = None  # the best's time there
    paired: Optional[dict] = None  # a near miss's back-to-back pair with the best (autokernel.paired)

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
        rows.append(ReportRow(values, k.name if k else (e.kernel_type or "?"), k.share if k else 0.0, e.proposer,
                              e.duration_s, e.screen_us, e.screen_best_us,
                              json.loads(e.paired_json) if e.paired_json else None))
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
    screened: int = 0  # candidates the screen timed
    screened_out: int = 0  # ... and stopped before the full judgement
    stopped_slow: int = 0  # stopped, and at least SLOW x the best's time at the heaviest shape
    judged_slow: int = 0  # fully judged although at least SLOW x the best (what the screen is for)


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
            **screen_counts(group),
        ))
    return out


def screen_counts(group: list[ReportRow]) -> dict[str, int]:
    """What the screen did for one kernel's rows: how many it timed and stopped, how many of those
    were SLOW x the best or worse, and how many that slow still got the full judgement (the best
    being the kernel's best kept-or-start latency of the run before the row)."""
    from autokernel.screening import SLOW

    out = {"screened": 0, "screened_out": 0, "stopped_slow": 0, "judged_slow": 0}
    best: dict[Any, float] = {}
    for r in group:
        v = r.values
        if r.screen_us is not None:
            out["screened"] += 1
            if v["status"] == "screened":
                out["screened_out"] += 1
                out["stopped_slow"] += bool(r.screen_best_us) and r.screen_us >= SLOW * r.screen_best_us
        b = best.get(v["run"])
        if v["status"] not in ("screened", "baseline") and v["latency_us"] and b and v["latency_us"] >= SLOW * b:
            out["judged_slow"] += 1
        if v["status"] in ACHIEVED and v["latency_us"] and (b is None or v["latency_us"] < b):
            best[v["run"]] = v["latency_us"]
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
        "| best latency (us) | baseline (us) | screened out |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        share = f"{100 * s.share:.1f}%" if s.share else "–"
        best_lat = "–" if s.best_latency_us is None else _num(s.best_latency_us)
        base_lat = "–" if s.baseline_latency_us is None else _num(s.baseline_latency_us)
        lines.append(f"| {_md_cell(s.kernel)} | {s.kernel_type} | {s.backend} | {share} | {s.experiments} | {s.kept} "
                     f"| {s.failed} | {_x(s.best_vs_eager)} | {_x(s.best_vs_compile)} | {best_lat} | {base_lat} "
                     f"| {f'{s.screened_out}/{s.screened}' if s.screened else '–'} |")
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
    lines += screening_md(summaries) + pairs_md(rows) + history_md(rows)
    return "\n".join(lines) + llm_md(llm)


def screening_md(summaries: list[KernelSummary]) -> list[str]:
    from autokernel.screening import SLOW

    timed = sum(s.screened for s in summaries)
    if not timed:
        return []
    out_ = sum(s.screened_out for s in summaries)
    return [f"Screening: {out_} of {timed} screened candidates stopped before the full judgement, "
            f"{sum(s.stopped_slow for s in summaries)} of them {SLOW:g}x the best's time or slower; "
            f"fully judged at {SLOW:g}x the best or slower: {sum(s.judged_slow for s in summaries)}.", ""]


def pairs_md(rows: list[ReportRow]) -> list[str]:
    """The near misses timed back to back with the best, each with its verdict (nothing without)."""
    pairs = [r for r in rows if r.paired]
    if not pairs:
        return []
    lines = [f"Pairs: {len(pairs)} near misses timed back to back with the best, "
             f"{sum(r.values['status'] == 'kept' for r in pairs)} kept on the pair's verdict.", "",
             "| # | kernel | rounds | candidate / best | 99% bound | verdict |", "|---:|---|---:|---:|---:|---|"]
    for r in pairs:
        v = r.paired
        lines.append(f"| {r.values['experiment']} | {_md_cell(r.kernel)} | {v.get('rounds', 0)} "
                     f"| {_num(v.get('ratio'))} | {_num(v.get('upper'))} | {_md_cell(str(v.get('reason') or ''))} |")
    return lines + [""]


def history_md(rows: list[ReportRow]) -> list[str]:
    """Per kernel: its start and every keep, with the wall time into its run, the latency, the
    speed-up over eager where timed, and what changed."""
    lines = ["## History of each kernel", ""]
    groups: dict[str, list[ReportRow]] = {}
    for r in rows:
        groups.setdefault(r.kernel, []).append(r)
    for name, group in groups.items():
        tried = sum(not r.starting_point for r in group)
        lines += [f"### {_md_cell(name)} ({tried} experiments)", "", "| # | run | minutes in | status | latency (us) "
                  "| vs eager | description |", "|---:|---:|---:|---|---:|---:|---|"]
        spent: dict[Any, float] = {}
        for r in rows:  # minutes into the run, counted over every kernel's rows of that run
            run = r.values["run"]
            spent[run] = spent.get(run, 0.0) + float(r.duration_s or 0.0)
            if r.kernel == name and r.values["status"] in ACHIEVED:
                v = r.values
                status = v["status"] + (" (paired)" if r.paired else "")
                lines.append(f"| {v['experiment']} | {run} | {spent[run] / 60:.1f} | {status} "
                             f"| {_num(v['latency_us'])} | {_x(v['speedup_vs_pytorch'])} "
                             f"| {_md_cell(str(v['description'] or ''))[:120]} |")
        lines.append("")
    return lines


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
