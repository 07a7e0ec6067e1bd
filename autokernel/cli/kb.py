"""`autokernel kb list|run|score`: KernelBench problems through the optimization loop, scored honestly."""

from __future__ import annotations

import json
import time
from typing import Any, Optional

import typer
from rich.table import Table

from autokernel.cli.console import err, out, warn_if_unsandboxed
from autokernel.cli.options import Candidates, LLMPrice, MaxCost, MaxLLMCalls, Ray, Temperature, positive
from autokernel.cli.runlog import RunLog, tee
from autokernel.redact import redact
from autokernel.textfmt import number

kb_app = typer.Typer(help="KernelBench: list problems, optimize them (kb run), score the results (kb score).",
                     no_args_is_help=True, add_completion=False)

_SOURCE_HELP = ("auto (checkout, else HF cache, else the sample set), official (checkout or HF cache), "
                "checkout, hf, or sample (the autokernel sample problems, not the official KernelBench set).")


def _ids(problems: Optional[str]) -> Optional[list[int]]:
    if not problems:
        return None
    try:
        return [int(x) for x in problems.replace(" ", "").split(",") if x]
    except ValueError:
        raise typer.BadParameter("--problems takes problem ids separated by commas, e.g. 1,3,19") from None


@kb_app.command("list")
def list_cmd(
    ctx: typer.Context,
    level: Optional[int] = typer.Option(None, "--level", min=1, max=4, help="Only this level (1-4)."),
    source: str = typer.Option("auto", "--source", help=_SOURCE_HELP),
    kb_path: Optional[str] = typer.Option(None, "--kb-path", help="KernelBench checkout (or $KERNELBENCH_PATH)."),
    size: str = typer.Option("auto", "--size", help="auto (tiny for the sample set without a GPU), default (GPU sizes), "
                                                   "or tiny (sample problems scaled down for CPU runs)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the problems with their status in the store."""
    from autokernel.kb.problems import load_problems, resolve_size, resolve_source, source_label
    from autokernel.kb.score import list_problems
    from autokernel.store import Store

    concrete = resolve_source(source, kb_path)
    size = resolve_size(size, concrete)
    probs = load_problems(concrete, kb_path, level=level, size=size)
    paths = ctx.obj.ensure()
    with Store(paths.db) as store:
        rows = list_problems(store, probs)
    if as_json:
        out.print_json(json.dumps({"source": concrete, "source_label": source_label(concrete), "problems": rows}))
        return
    t = Table(title=f"KernelBench problems: {source_label(concrete)}" + ("" if size == "default" else f", size {size}"))
    for col in ("level", "id", "name", "status", "start", "exps", "x eager", "x compile", "note"):
        t.add_column(col, justify="right" if col in ("level", "id", "exps", "x eager", "x compile") else "left")
    for r in rows:
        note = ("degenerate: " + r["degenerate"]) if r["degenerate"] else (r["error"] or "")
        t.add_row(str(r["level"]), str(r["problem_id"]), r["name"], r["status"], r["start"] or "-", str(r["experiments"]),
                  number(r["speedup_vs_eager"]), number(r["speedup_vs_compile"]), note[:80])
    out.print(t)


class _Progress:
    """Rich live line on a terminal, plain timestamped lines otherwise."""

    def __init__(self, live: bool, quiet: bool):
        self.quiet = quiet
        self.problem = ""
        self.last = ""
        self.live = None
        if live and not quiet:
            from rich.live import Live

            self.live = Live(self.render(), console=out, refresh_per_second=4, transient=True)

    def render(self):
        from rich.text import Text

        t = Text()
        t.append(self.problem or "starting", style="bold")
        t.append(f"\n{self.last}")
        return t

    def __call__(self, event) -> None:
        if event.kind == "state":
            return
        message = redact(event.message)
        if event.kind == "problem":
            self.problem = message
        else:
            self.last = message
        if self.quiet:
            return
        if self.live is not None:
            self.live.update(self.render())
            if event.kind in ("problem_done", "problem_failed", "exhausted"):
                self.live.console.print(f"[{time.strftime('%H:%M:%S')}] {message}", highlight=False, markup=False)
        else:
            out.print(f"[{time.strftime('%H:%M:%S')}] {message}", highlight=False, markup=False)


@kb_app.command("run")
def run_cmd(
    ctx: typer.Context,
    level: Optional[int] = typer.Option(None, "--level", min=1, max=4, help="Level 1-4 (required unless --resume)."),
    problems: Optional[str] = typer.Option(None, "--problems", help="Problem ids, comma-separated (default: all)."),
    experiments_per_problem: Optional[int] = typer.Option(3, "--experiments-per-problem", "-k", min=0,
                                                          help="Experiments per problem after its starting point."),
    hours: Optional[float] = typer.Option(None, "--hours", callback=positive, help="Time budget of the whole run (default 8)."),
    agent: str = typer.Option("search", "--agent", help="Proposer: search (offline) or llm."),
    source: str = typer.Option("auto", "--source", help=_SOURCE_HELP),
    kb_path: Optional[str] = typer.Option(None, "--kb-path", help="KernelBench checkout (or $KERNELBENCH_PATH)."),
    size: str = typer.Option("auto", "--size", help="auto (tiny for the sample set without a GPU), default (GPU sizes), "
                                                   "or tiny (sample problems scaled down for CPU runs)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the latest kb run that got as far as an experiment."),
    resume_run: Optional[int] = typer.Option(None, "--resume-run", min=1, help="Continue kb run RUN."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="LLM model name (agent llm)."),
    provider: Optional[str] = typer.Option(None, "--provider", help="openai or anthropic (agent llm)."),
    candidates: Candidates = None,
    temperature: Temperature = None,
    max_llm_calls: MaxLLMCalls = None,
    max_cost: MaxCost = None,
    llm_price: LLMPrice = None,
    timeout_s: float = typer.Option(600.0, "--timeout", callback=positive, help="Time limit of one judgement, seconds."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="Spread the problems over these GPUs, one judge per GPU: indices (0,1,2,3) or all."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Spread the problems over N CPU workers (the Triton interpreter)."),
    ray: Ray = None,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (no progress)."),
) -> None:
    """Optimize KernelBench problems: initial ModelNew from the kernel library, then the loop."""
    from autokernel.kb.runner import kb_run
    from autokernel.pool import PoolOptions
    from autokernel.proposers import LLMSettings
    from autokernel.store import Store
    from autokernel.workspace import Workspace

    ids = _ids(problems)
    paths = ctx.obj.ensure()
    progress = _Progress(live=out.is_terminal, quiet=as_json)
    warn_if_unsandboxed()
    log = RunLog(paths.logs, "kb")
    with Store(paths.db) as store:
        workspace = Workspace.open(paths)
        if progress.live is not None:
            progress.live.start()
        try:
            summary = kb_run(store, workspace, level=level, ids=ids, source=source, kb_path=kb_path,
                             size=size, experiments_per_problem=experiments_per_problem, hours=hours, agent=agent,
                             resume=resume_run if resume_run is not None else resume,
                             llm=LLMSettings(llm_model, provider, candidates, temperature, max_llm_calls, max_cost,
                                             llm_price),
                             timeout_s=timeout_s, pool_options=PoolOptions(gpus, workers, ray),
                             on_event=tee(progress, log))
        finally:
            if progress.live is not None:
                progress.live.stop()
            log.close()
    if as_json:
        out.print_json(json.dumps(summary.to_dict(), default=str))
    else:
        t = Table(title=f"kb run {summary.run_id}: level {summary.level}, {summary.source_label} ({summary.status})")
        for col in ("id", "name", "start", "baseline", "best us", "x eager", "x compile", "exps", "kept", "note"):
            t.add_column(col)
        for p in summary.problems:
            note = ("degenerate" if p["degenerate"] else "") or (p["baseline_error"] or "")
            t.add_row(str(p["problem_id"]), p["name"] or "", p["start"] or "", p["baseline_status"] or "",
                      number(p["best_us"], ".1f"), number(p["speedup_vs_eager"]), number(p["speedup_vs_compile"]),
                      str(p["experiments"]), str(p["kept"]), note[:60])
        out.print(t)
        out.print(f"{summary.experiments} experiments, {summary.kept} kept; stopped: {summary.stop_reason}",
                  highlight=False)
    if summary.status == "interrupted":
        err.print(f"interrupted; continue with: autokernel kb run --resume-run {summary.run_id}")
        raise typer.Exit(130)


def _fmt_pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Timing: {result['timing']}" + (f" ({', '.join(result['devices'])})" if result["devices"] else ""), ""]
    for lv in result["levels"]:
        lines.append(f"### Level {lv['level']}: {lv['source_label']}")
        lines.append("")
        lines.append(f"{lv['correct']}/{lv['scored']} correct ({_fmt_pct(lv['correctness_rate'])}); "
                     "geomean speed-up over correct problems: "
                     f"{number(lv['geomean_speedup_vs_eager'], '.3f')}x vs eager, "
                     f"{number(lv['geomean_speedup_vs_compile'], '.3f')}x vs torch.compile")
        lines.append("")
        ps = list(lv["fast_p_vs_eager"])
        lines.append("| baseline | " + " | ".join(f"fast_{p}" for p in ps) + " |")
        lines.append("|---|" + "---|" * len(ps))
        for base in ("eager", "compile"):
            lines.append(f"| {base} | " + " | ".join(_fmt_pct(lv[f'fast_p_vs_{base}'][p]) for p in ps) + " |")
        lines.append("")
        if lv["degenerate"]:
            lines.append("Degenerate (reported apart, not in the numbers above): " + "; ".join(
                f"{d['problem_id']}_{d['name']} ({d['reason']}; {'correct' if d['correct'] else 'not correct'})"
                for d in lv["degenerate"]))
            lines.append("")
        if lv["flagged"]:
            lines.append("Flagged for review (over 10x the faster of eager and torch.compile after re-timing; counted correct, not fast): " + ", ".join(
                f"{d['problem_id']}_{d['name']} ({number(d['speedup_vs_eager'])}x)" for d in lv["flagged"]))
            lines.append("")
        lines.append("| id | name | correct | x eager | x compile | start | note |")
        lines.append("|---|---|---|---|---|---|---|")
        for p in lv["per_problem"]:
            note = "degenerate" if p["degenerate"] else "not run" if not p["attempted"] else \
                (p["error"] or "")[:80].replace("|", "/")
            lines.append(f"| {p['problem_id']} | {p['name']} | {'yes' if p['correct'] else 'no'} | "
                         f"{number(p['speedup_vs_eager'])} | {number(p['speedup_vs_compile'])} | "
                         f"{p['start'] or ''} | {note} |")
        lines.append("")
    return "\n".join(lines)


@kb_app.command("score")
def score_cmd(
    ctx: typer.Context,
    level: Optional[int] = typer.Option(None, "--level", min=1, max=4, help="Only this level (1-4)."),
    source: Optional[str] = typer.Option(None, "--source", help="Only this source (sample, checkout, hf)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    md: bool = typer.Option(False, "--markdown", help="Print a markdown summary."),
    export: Optional[str] = typer.Option(None, "--export", help="Write the best ModelNew per problem under DIR."),
) -> None:
    """Per level: correctness, fast_p vs eager and torch.compile, geomean speed-up; degenerate apart."""
    from autokernel.kb.score import export_best, score
    from autokernel.store import Store

    paths = ctx.obj.ensure()
    with Store(paths.db) as store:
        result = score(store, level=level, source=source)
        if export:
            from autokernel.workspace import Workspace

            written = export_best(store, Workspace.open(paths), export, level=level)
            result["exported"] = [str(p) for p in written]
    if as_json:
        out.print_json(json.dumps(result, default=str))
        return
    if md:
        typer.echo(markdown(result))  # plain text: no wrapping of the table lines
        return
    out.print(f"timing: {result['timing']}", highlight=False)
    for lv in result["levels"]:
        t = Table(title=f"level {lv['level']}: {lv['source_label']}: {lv['correct']}/{lv['scored']} correct "
                        f"({_fmt_pct(lv['correctness_rate'])})")
        t.add_column("baseline")
        for p in lv["fast_p_vs_eager"]:
            t.add_column(f"fast_{p}", justify="right")
        t.add_column("geomean x", justify="right")
        for base in ("eager", "compile"):
            t.add_row(base, *[_fmt_pct(v) for v in lv[f"fast_p_vs_{base}"].values()],
                      number(lv[f"geomean_speedup_vs_{base}"], ".3f"))
        out.print(t)
        if lv["degenerate"]:
            out.print("degenerate (apart): " + ", ".join(f"{d['problem_id']}_{d['name']}" for d in lv["degenerate"]),
                      highlight=False)
        if lv["flagged"]:
            out.print("flagged for review: " + ", ".join(f"{d['problem_id']}_{d['name']}" for d in lv["flagged"]),
                      highlight=False)
    if export:
        out.print(f"exported {len(result['exported'])} solution(s) to {export}", highlight=False)


def register(app: typer.Typer) -> None:
    # A command (not a Typer group) that hands its arguments to kb_app: groups are always listed
    # after commands in --help, and the flow order puts kb before report.
    @app.command("kb", context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                         "help_option_names": []},
                 help="KernelBench: list problems, optimize them (kb run), score the results (kb score).")
    def kb_cmd(ctx: typer.Context) -> None:
        args = list(ctx.args) or ["--help"]
        cmd = typer.main.get_command(kb_app)
        code = cmd.main(args=args, prog_name="autokernel kb", standalone_mode=False, obj=ctx.obj)
        if isinstance(code, int) and code:
            raise typer.Exit(code)
