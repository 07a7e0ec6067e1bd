"""`autokernel extract`: one editable kernel per bottleneck of a profile."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from autokernel.cli.console import err, out


def register(app: typer.Typer) -> None:
    @app.command("extract")
    def extract_cmd(
        ctx: typer.Context,
        profile: Optional[int] = typer.Option(None, "--profile", help="Profile id (default: the latest)."),
        top: int = typer.Option(5, "--top", min=1, help="How many bottlenecks to extract."),
        backend: str = typer.Option("triton", "--backend", help="triton | cuda"),
        as_json: bool = typer.Option(False, "--json", help="Print the kernels as JSON."),
    ) -> None:
        """Create a workspace branch from the starting kernel for each of the top bottlenecks."""
        from autokernel.extract import extract, kernel_shapes
        from autokernel.store import Store
        from autokernel.workspace import Workspace

        paths = ctx.obj.ensure()
        skipped: list[tuple[str, str]] = []
        with Store(paths.db) as store:
            ws = Workspace.open(paths)
            kernels = extract(store, ws, profile_id=profile, top=top, backend=backend,
                              on_skip=lambda n, why: skipped.append((n, why)))
        if as_json:
            out.print_json(json.dumps({
                "kernels": [{"id": k.id, "name": k.name, "kernel_type": k.kernel_type, "backend": k.backend,
                             "share": k.share, "dtype": k.dtype, "branch": k.branch,
                             "shapes": kernel_shapes(k)[0], "weights": kernel_shapes(k)[1]} for k in kernels],
                "skipped": [{"name": n, "reason": why} for n, why in skipped]}))
            return
        table = Table(title="extracted kernels")
        for col in ("kernel", "type", "backend", "share", "shapes", "branch"):
            table.add_column(col)
        for k in kernels:
            shapes, _ = kernel_shapes(k)
            table.add_row(k.name, k.kernel_type, k.backend, f"{100 * k.share:.1f}%", str(len(shapes)), k.branch)
        out.print(table)
        for name, why in skipped:
            err.print(f"skipped {name}: {why}")
