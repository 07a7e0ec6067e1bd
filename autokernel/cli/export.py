"""`autokernel export`: write a kernel in the kernels-hub layout and optionally push it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from autokernel.cli.console import err, out


def export_command(
    ctx: typer.Context,
    kernel: str = typer.Argument(..., help="Kernel name in the store (llama-7b.rmsnorm, or rmsnorm when one kernel fits) or a kernel file."),
    repo_id: str = typer.Option(..., "--repo-id", help="Hub repository, ORG/NAME."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Export folder (default <home>/exports/NAME)."),
    push: bool = typer.Option(False, "--push", help="Upload to the Hub (token from HF_TOKEN or the login)."),
    commit: Optional[str] = typer.Option(None, "--commit", help="Export this commit instead of the best kept one."),
    experiment: Optional[int] = typer.Option(None, "--experiment", min=1, help="Export this experiment's commit."),
    version: int = typer.Option(1, "--version", min=0, help="Kernel major version (branch v<N> on the Hub)."),
    build: Optional[bool] = typer.Option(None, "--build/--no-build",
                                         help="Build the CUDA variant here (default: when nvcc and a CUDA torch exist)."),
) -> None:
    """Export the best kept version of a kernel so the Hugging Face `kernels` library can load it."""
    from autokernel.export import export_kernel, provenance_from_file, provenance_from_store
    from autokernel.export.layout import kernel_name_from_repo

    paths = ctx.obj.ensure()
    path = Path(kernel)
    if path.is_file():
        source, prov = provenance_from_file(path)
    else:
        from autokernel.store import Store
        from autokernel.workspace import Workspace

        with Store(paths.db) as store:
            source, prov = provenance_from_store(store, Workspace.open(paths), kernel, commit=commit,
                                                 experiment=experiment)
    target = out_dir or paths.home / "exports" / kernel_name_from_repo(repo_id)
    result = export_kernel(source, prov, repo_id, target, version=version, build_cuda=build)
    out.print(f"exported [bold]{prov.kernel_name}[/] ({prov.kernel_type}, {prov.backend}) to {result.out_dir}")
    for v in result.variants:
        out.print(f"  build/{v}")
    if result.note:
        err.print(result.note)
    if push:
        from autokernel.export.push import push_folder

        url = push_folder(result.out_dir, repo_id, version=version)
        out.print(f"pushed to {url}")
    else:
        err.print("not pushed (use --push to upload)", style="dim")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
