"""`autokernel loop`: optimize a model's kernels unattended, then verify; a Rich live display shows
the current kernel, experiment number, last status, best speed-ups, predicted end-to-end speed-up
and time left. Ctrl-C ends the current experiment cleanly and prints the report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from autokernel.cli.console import err, out, warn_if_unsandboxed
from autokernel.cli.options import Candidates, LLMPrice, MaxCost, MaxLLMCalls, Ray, Temperature, positive
from autokernel.cli.recap import recap_lines
from autokernel.cli.runlog import RunLog, tee
from autokernel.redact import redact
from autokernel.textfmt import number


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def kernels_table(kernels: list[dict[str, Any]], title: str = "") -> Table:
    """Per kernel: its share, its best against its start and against the library the model would
    otherwise run (torch.compile's op or eager's, per --target-mode; '-' where no library timing
    exists, e.g. CPU timings), experiments, keeps, and the screen: candidates it stopped of those
    it timed, and configurations rejected before compiling (invalid for the device)."""
    t = Table(title=title or None)
    for col, just in (("kernel", "left"), ("share", "right"), ("baseline us", "right"), ("best us", "right"),
                      ("x baseline", "right"), ("x library", "right"), ("% roofline", "right"), ("exps", "right"),
                      ("kept", "right"), ("screened out", "right"), ("time", "right"), ("state", "left")):
        t.add_column(col, justify=just)
    for k in kernels:
        state = "exhausted" if k["exhausted"] else ("plateau" if k["plateaued"] else "active")
        if k.get("invest") and not k["exhausted"]:
            state = "investing"
        screened = k.get("screened") or 0
        screen = f"{k.get('screened_out', 0)}/{screened}" if screened else "-"
        if k.get("rejected"):
            screen += f" +{k['rejected']} invalid"
        kept = str(k["kept"]) + (f" ({k['paired_kept']} paired)" if k.get("paired_kept") else "")
        t.add_row(k["name"], f"{100 * k['share']:.1f}%", number(k["baseline_us"]), number(k["best_us"]),
                  f"{k['speedup_vs_baseline']:.3f}", number(k.get("vs_library"), ".2f"), number(k["pct_peak"], ".1f"),
                  str(k["attempts"]), kept, screen, _fmt_s(k["time_s"]), state)
    return t


def judges_line(judges: list[dict[str, Any]]) -> str:
    """A pool's judges at a glance: how many are busy, retired, and their workers' restarts."""
    busy = sum(1 for j in judges if j.get("busy"))
    retired = sum(1 for j in judges if j.get("retired"))
    restarts = sum(j.get("restarts") or 0 for j in judges)
    return (f"judges: {busy} of {len(judges) - retired} busy" + (f", {retired} retired" if retired else "")
            + (f", {restarts} worker restart(s)" if restarts else ""))


class Display:
    """Renders LoopEvents; a Live panel on a terminal, plain lines otherwise."""

    def __init__(self, live: bool):
        self.state: dict[str, Any] = {}
        self.current = ""
        self.last = ""
        self.why = ""  # the orchestrator's reason for the kernel it works on
        self.log: list[str] = []
        self.live = Live(self.render(), console=out, refresh_per_second=4, transient=False) if live else None

    def render(self):
        s = self.state
        head = Text()
        head.append(f"run {s.get('run_id', '?')}  ", style="bold")
        head.append(f"experiments {s.get('experiments', 0)}"
                    + (f"/{s['max_experiments']}" if s.get("max_experiments") else "") + "  ")
        mode = s.get("target_mode", "compile")
        head.append(f"predicted model speed-up {s.get('predicted_speedup', 1.0):.3f}x ({mode})  ", style="green")
        head.append(f"time left {_fmt_s(s.get('time_left_s'))}")
        ks = s.get("kernels") or []
        timed, out_ = sum(k.get("screened") or 0 for k in ks), sum(k.get("screened_out") or 0 for k in ks)
        same = sum(k.get("same_program") or 0 for k in ks)
        screen = Text(f"screen: {out_} of {timed} candidates stopped"
                      + (f" ({100 * out_ / timed:.0f}%)" if timed else "")
                      + (f", {same} of them for running the best's program" if same else "")
                      + f", {sum(k.get('rejected') or 0 for k in ks)} invalid before compiling, "
                        f"{s.get('duplicates', 0)} repeats skipped"
                      + (f"; pairs: {sum(k.get('paired') or 0 for k in ks)} near misses timed against the best, "
                         f"{sum(k.get('paired_kept') or 0 for k in ks)} kept" if any(k.get("paired") for k in ks)
                         else ""), style="dim")
        parts = [head, screen, Text(f"why: {self.why}", style="dim"), Text(f"now: {self.current}"),
                 Text(f"last: {self.last}")]
        if s.get("judges"):
            parts.insert(2, Text(judges_line(s["judges"]), style="dim"))
        if s.get("kernels"):
            parts.append(kernels_table(s["kernels"]))
        parts += [Text(line, style="dim") for line in self.log[-4:]]
        return Group(*parts)

    def __call__(self, event) -> None:
        message = redact(event.message)
        if event.kind == "state":
            self.state = event.data
        elif event.kind == "start":
            self.current = message
        elif event.kind == "done":
            self.last = message
            self.current = ""
        elif event.kind == "schedule":
            self.why = message
        else:
            self.log.append(message)
        if self.live is not None:
            self.live.update(self.render())
        elif event.kind not in ("state", "duplicate"):
            out.print(f"[{time.strftime('%H:%M:%S')}] {message}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    @app.command("loop")
    def loop_cmd(
        ctx: typer.Context,
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model preset, transformers id/dir, or file.py:factory."),
        hours: Optional[float] = typer.Option(None, "--hours", callback=positive, help="Time budget in hours (default 8; a resumed run keeps its own and counts time already spent)."),
        max_experiments: Optional[int] = typer.Option(None, "--max-experiments", min=1, help="Stop after N experiments in the run."),
        agent: str = typer.Option("search", "--agent", help="Proposer: search (offline) or llm."),
        kernels: Optional[str] = typer.Option(None, "--kernels", help="Only these kernel types, comma-separated."),
        backend: str = typer.Option("triton", "--backend", help="triton or cuda."),
        resume: Optional[int] = typer.Option(None, "--resume", help="Continue loop run RUN."),
        batch: int = typer.Option(1, "--batch", min=1, help="Batch size of the model's inputs."),
        seq: Optional[int] = typer.Option(None, "--seq", min=1, help="Sequence length (default: the preset's)."),
        dtype: Optional[str] = typer.Option(None, "--dtype", help="bf16 | fp16 | fp32 (default bf16 on GPU, fp32 on CPU)."),
        top: int = typer.Option(5, "--top", min=1, help="Kernels to extract when the model is new."),
        llm_model: Optional[str] = typer.Option(None, "--llm-model", help="LLM model name (or $AUTOKERNEL_LLM_MODEL)."),
        provider: Optional[str] = typer.Option(None, "--provider", help="openai or anthropic (or $AUTOKERNEL_LLM_PROVIDER)."),
        candidates: Candidates = None,
        temperature: Temperature = None,
        max_llm_calls: MaxLLMCalls = None,
        max_cost: MaxCost = None,
        llm_price: LLMPrice = None,
        timeout_s: float = typer.Option(600.0, "--timeout", callback=positive, help="Time limit of one bench judgement, seconds; once a kernel has judgements, its next gets at most 4x its longest (not under 120 s)."),
        target_mode: Optional[str] = typer.Option(None, "--target-mode", help="How the model runs, so what a kernel must beat: compile (torch.compile's op, GPU time; default) or eager (eager's op, host time included)."),
        screen_margin: Optional[float] = typer.Option(None, "--screen-margin", help="A candidate screened at the heaviest shape goes on to the full judgement within this factor of the best (default 1.08 on a GPU, 1.2 on the CPU)."),
        gpus: Optional[str] = typer.Option(None, "--gpus", help="Judge on these GPUs at once, one judge per GPU: indices (0,1,2,3) or all."),
        workers: Optional[int] = typer.Option(None, "--workers", help="Judge on N CPU workers at once (the Triton interpreter; machines without a GPU, tests)."),
        ray: Ray = None,
        no_verify: bool = typer.Option(False, "--no-verify", help="Skip the verification at the end."),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (no live display)."),
    ) -> None:
        """Optimize a model's bottleneck kernels unattended (profiles and extracts first if needed), then verify."""
        from autokernel.loop import run_loop
        from autokernel.pool import PoolOptions
        from autokernel.proposers import LLMSettings
        from autokernel.store import Store
        from autokernel.workspace import Workspace

        paths = ctx.obj.ensure()
        display = Display(live=not as_json and out.is_terminal)
        warn_if_unsandboxed()
        log = RunLog(paths.logs, "loop")
        types = [t.strip() for t in kernels.split(",") if t.strip()] if kernels else None
        with Store(paths.db) as store:
            workspace = Workspace.open(paths)
            if display.live is not None:
                display.live.start()
            try:
                summary = run_loop(store, workspace, model=model, hours=hours, max_experiments=max_experiments,
                                   agent=agent, kernels=types, backend=backend, resume_run_id=resume, batch=batch,
                                   seq=seq, dtype=dtype, top=top,
                                   llm=LLMSettings(llm_model, provider, candidates, temperature, max_llm_calls,
                                                   max_cost, llm_price),
                                   timeout_s=timeout_s, verify=not no_verify, target_mode=target_mode,
                                   margin=screen_margin, pool_options=PoolOptions(gpus, workers, ray),
                                   on_event=tee(None if as_json else display, log))
            finally:
                if display.live is not None:
                    display.live.stop()
                log.close()
        if as_json:
            out.print_json(json.dumps(summary.to_dict(), default=str))
        else:
            print_summary(summary, table=display.live is None, log=_shown(log.path))
        if summary.status == "interrupted":
            raise typer.Exit(130)


def _shown(path) -> str | None:
    """A path as the user would type it: relative to the working directory when under it."""
    if path is None:
        return None
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def print_summary(summary, table: bool = True, log: str | None = None) -> None:
    """The kernels' table (unless the live display left it on screen), then the recap."""
    if table:
        timing = ", CPU timings" if summary.timing == "cpu" else ""
        out.print(kernels_table(summary.kernels, title=f"loop run {summary.run_id} ({summary.model}, "
                                                       f"{summary.agent}{timing}): {summary.status}"))
    lines = recap_lines(summary, log=log)
    out.print(f"\n[bold]{escape(lines[0])}[/]", highlight=False)
    for line in lines[1:]:
        out.print(line, highlight=False, markup=False)
