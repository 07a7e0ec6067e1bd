"""`autokernel verify`: the model with its best kernels plugged in vs the original."""

from __future__ import annotations

import json
import time
from typing import Any, Optional

import typer
from rich.table import Table

from autokernel.cli.console import err, out
from autokernel.cpu_timing import CPU_LABEL
from autokernel.textfmt import number


def verify_table(data: dict[str, Any]) -> Table:
    table = Table(title=f"verify {data['model']} on {data['device']} ({data['dtype']})")
    for col in ("kernel", "type", "from", "kernel speed-up", "calls", "fallbacks", "rel. error alone", "status"):
        table.add_column(col)
    for k in data["kernels"]:
        if k.get("slower"):
            status = "[yellow]correct, left out[/]: not faster than eager"
        elif k["ok"]:
            status = "[green]plugged[/]" + (f" ({k['error']})" if k["error"] else "")
        else:
            status = f"[red]left out[/]: {k['error']}"
        speedup = f"{k['speedup']:.2f}x" if k.get("measured", True) else "-"
        table.add_row(k["name"], k["kernel_type"], k["source"], speedup, str(k["calls"]),
                      str(k["fallbacks"]), number(k["rel_error"], ".2e"), status)
    return table


def workload_table(data: dict[str, Any]) -> Table:
    """One row per workload and mode: without / with AutoKernel, the kernels used, the headline."""
    table = Table(title="where users run it: best with AutoKernel vs best without, per workload")
    for col in ("workload", "mode", "without ms", "with ms", "x", "kernels", "graph breaks / recompiles", "note"):
        table.add_column(col, overflow="fold")
    for w in data.get("workloads", []):
        if w.get("error") and not w.get("rows"):
            table.add_row(w["workload"], "-", "-", "-", "-", "-", "-", f"[red]{w['error']}[/]")
            continue
        for r in w["rows"]:
            wo, wi = r["without"], r["with_"]
            x = wo["ms"] / wi["ms"] if wo and wi else None
            gb = "-" if r["graph_breaks"] is None else f"{r['graph_breaks']} / {r['recompiles']}"
            table.add_row(w["workload"], r["mode"], number(wo and wo["ms"], ".3f"), number(wi and wi["ms"], ".3f"),
                          number(x, ".3f", "x"),
                          ", ".join(r["kernels"]) or "-", gb, r["note"])
        bw, bk = w.get("best_without"), w.get("best_with")
        if bw and bk:
            table.add_row(w["workload"], "[bold]best[/]", f"{bw[1]:.3f} ({bw[0]})", f"{bk[1]:.3f} ({bk[0]})",
                          f"[bold]{w['speedup']:.3f}x[/]", "", "", w.get("error") or "")
    return table


def summary_lines(data: dict[str, Any]) -> list[str]:
    lines = [f"outputs vs {data.get('reference', 'eager')}: relative error {number(data['rel_error'], '.2e')} "
             f"(tolerance {data['tolerance']:.3g}), "
             f"max abs {number(data['max_abs_error'], '.2e')} -> {'MATCH' if data['ok'] else 'MISMATCH'}"]
    plugged = [k for k in data["kernels"] if k["ok"] and not k.get("slower")]
    if data["eager_ms"] is not None and not plugged:
        lines.append(f"forward: eager {number(data['eager_ms'], '.3f')} ms; nothing plugged in, "
                     "so no speed-up to measure")
    elif data["eager_ms"] is not None:
        cpu = str(data.get("device", "")).startswith("cpu")
        label = f"{CPU_LABEL}, median of repeated passes; not GPU speed" if cpu else "CUDA events"
        lines.append(f"forward ({label}): eager {number(data['eager_ms'], '.3f')} ms, "
                     f"plugged {number(data['plugged_ms'], '.3f')} ms, "
                     f"torch.compile {number(data['compile_ms'], '.3f')} ms")
        lines.append(f"end-to-end speed-up {number(data['speedup_vs_eager'], '.2f', 'x')} vs eager, "
                     f"{number(data['speedup_vs_compile'], '.2f', 'x')} vs torch.compile"
                     + (" (CPU timings)" if cpu else "")
                     + f"; Amdahl prediction {number(data['amdahl_prediction'], '.2f', 'x')}")
    lines.extend(data.get("notes", []))
    return lines


def register(app: typer.Typer) -> None:
    @app.command("verify")
    def verify_cmd(
        ctx: typer.Context,
        run: Optional[int] = typer.Option(None, "--run", help="Verify the model of this run (default: the latest)."),
        model: Optional[str] = typer.Option(None, "--model", "-m", help="Model to verify (default: the run's)."),
        kernel: Optional[list[str]] = typer.Option(None, "--kernel", help="Only these kernels (repeatable)."),
        iters: Optional[int] = typer.Option(None, "--iters", min=0, help="Timed forward passes (0: no timing)."),
        include_slower: bool = typer.Option(False, "--include-slower",
                                            help="Plug in correct kernels even when not faster than eager."),
        workload: Optional[list[str]] = typer.Option(
            None, "--workload", "-w", help="Time at this workload (repeatable): prefill:1x2048, forward:32x128, "
                                           "decode:32@2048. Default: every workload of the model on a GPU."),
        mode: Optional[list[str]] = typer.Option(
            None, "--mode", help="eager, compile, reduce-overhead (repeatable). Default: all three on a GPU, "
                                 "eager on a CPU."),
        routes_apart: bool = typer.Option(
            False, "--routes-apart", help="Also time each compiled mode with the kernels' routes alone (every "
                                          "kernel declining): splits the gain into the routes' and the kernels'."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Plug the best kernels into the model, compare outputs with the original, time the forward pass."""
        from autokernel.errors import VerifyMismatchError
        from autokernel.store import Store
        from autokernel.verify import verify
        from autokernel.workspace import Workspace

        from autokernel.errors import ConfigError
        from autokernel.workload_timing import MODES
        from autokernel.workloads import parse_workload

        loads = [parse_workload(w) for w in workload] if workload else None
        bad = [m for m in (mode or []) if m not in MODES]
        if bad:
            raise ConfigError(f"unknown mode {bad[0]!r}; use {', '.join(MODES)}")
        paths = ctx.obj.ensure()
        t0 = time.perf_counter()

        def progress(msg: str) -> None:  # on stderr in --json mode too: a log then shows where verify's time went
            err.print(f"[dim][{time.perf_counter() - t0:7.1f} s] {msg}[/]")

        with Store(paths.db) as store:
            result = verify(store, Workspace.open(paths), run_id=run, model=model, kernels=kernel or None,
                            time_iters=iters, min_speedup=0.0 if include_slower else None, workloads=loads,
                            modes=tuple(mode) if mode else None, routes_apart=routes_apart,
                            progress=progress)
        data = result.to_dict()
        if as_json:
            out.print_json(json.dumps(data, default=str))
        else:
            out.print(verify_table(data))
            if data.get("workloads"):
                out.print(workload_table(data))
            for line in summary_lines(data):
                out.print(line)
            out.print(f"recorded as run {result.run_id}")
        for name in data["failed"]:
            err.print(f"left out {name}: it failed inside the model")
        if not result.ok:
            raise VerifyMismatchError(f"the optimized {result.model} differs from the original: relative "
                                      f"error {result.rel_error:.3g} > {result.tolerance:g}")
