"""`autokernel report`: results.tsv (or CSV, JSON, a Markdown summary) and the progress plot."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from autokernel.cli.console import err, out


class ReportFormat(str, Enum):
    tsv = "tsv"
    csv = "csv"
    json = "json"
    md = "md"


def report_command(
    ctx: typer.Context,
    fmt: ReportFormat = typer.Option(ReportFormat.tsv, "--format", "-f", help="Output format."),
    run: Optional[int] = typer.Option(None, "--run", help="Only this run's experiments (default: every run)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw the progress plot to this PNG file."),
) -> None:
    """Report every experiment: results.tsv columns, or CSV / JSON / a Markdown summary."""
    from autokernel.errors import ConfigError, NotFoundError
    from autokernel.report import build_llm_usage, build_rows, format_report, latest_workloads_md, missing_run
    from autokernel.report_plot import plot_progress

    paths = ctx.obj
    extra = ""
    llm: list = []
    if paths.db.exists():
        from autokernel.store import Store

        with Store(paths.db) as store:
            try:
                rows = build_rows(store, run)
            except NotFoundError as exc:
                raise missing_run(run) from exc
            if fmt == ReportFormat.md:
                llm = build_llm_usage(store, run)
                extra = latest_workloads_md(store, run)
    elif run is not None:
        raise missing_run(run)
    else:
        rows = []  # a report never creates a home or a database
    text = format_report(rows, fmt.value, llm) + (("\n" + extra) if extra else "")
    if output is None:
        # raw write: a Rich print would expand the TSV's tabs and read markup in descriptions
        out.file.write(text)
        out.file.flush()
    else:
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text)
        except OSError as exc:
            raise ConfigError(f"cannot write the report to {output}: {exc.strerror}") from exc
        starts = sum(r.starting_point for r in rows)
        what = f"{len(rows)} experiment{'s' if len(rows) != 1 else ''}" if not starts else \
            f"{len(rows)} rows ({len(rows) - starts} experiments + {starts} starting points)"
        err.print(f"wrote {what} to {output}", highlight=False)
    if plot is not None:
        try:
            drawn = plot_progress(rows, plot, title=f"AutoKernel progress (run {run})" if run else "AutoKernel progress")
        except OSError as exc:
            raise ConfigError(f"cannot write the plot to {plot}: {exc.strerror}") from exc
        err.print(f"plot written to {plot}: {drawn.note}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)
