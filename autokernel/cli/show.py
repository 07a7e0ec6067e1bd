"""`autokernel show`: a kernel's best kept version (or any experiment's) as a file, on stdout.

The workspace keeps kernels on git branches only, so this is how they are found without git:
`autokernel show rmsnorm > rmsnorm.py`. What the version is goes to stderr, the file to stdout.
"""

from __future__ import annotations

from typing import Optional

import typer

from autokernel.cli.console import err, out


def describe(prov, status: Optional[str], timing_cpu: bool) -> str:
    """One line on what a shown or exported version is, with its rounded measurements."""
    if prov.experiment is None:
        where = f"branch head ({prov.commit[:10]})" if prov.commit else "branch head"
    elif status == "baseline":
        where = f"its starting kernel, run {prov.run} (nothing kept beat it)"
    else:
        where = f"experiment {prov.experiment} of run {prov.run} ({(prov.commit or '')[:10]}, {status})"
    facts = []
    if prov.latency_us is not None:
        facts.append(f"{prov.latency_us:.1f} us" + (" (CPU timing)" if timing_cpu else ""))
    if prov.speedup_vs_eager:
        facts.append(f"{prov.speedup_vs_eager:.2f}x eager")
    if prov.speedup_vs_compile:
        facts.append(f"{prov.speedup_vs_compile:.2f}x torch.compile")
    return f"{prov.kernel_name} ({prov.kernel_type}, {prov.backend}): {where}" + (f"; {', '.join(facts)}" if facts else "")


def show_command(
    ctx: typer.Context,
    kernel: str = typer.Argument(..., help="Kernel name, full (llama-7b.rmsnorm) or short when it fits one (rmsnorm)."),
    experiment: Optional[int] = typer.Option(None, "--experiment", min=1, help="This experiment's version."),
    commit: Optional[str] = typer.Option(None, "--commit", help="This commit's version (a sha or its start)."),
) -> None:
    """Print the best kept version of a kernel (the file the loop found), e.g. `> kernel.py`."""
    from autokernel.errors import NotFoundError
    from autokernel.export import provenance_from_store
    from autokernel.store import Store
    from autokernel.workspace import Workspace

    paths = ctx.obj
    if not paths.db.exists():
        raise NotFoundError(f"no AutoKernel store in {paths.home}", hint="start with `autokernel loop --model M`")
    with Store(paths.db) as store:
        source, prov = provenance_from_store(store, Workspace.open(paths), kernel, commit=commit,
                                             experiment=experiment)
        row = next((e for e in store.list_experiments(run_id=prov.run) if e.number == prov.experiment), None) \
            if prov.run is not None else None
    cpu = row is not None and (row.device or "cpu").startswith("cpu")  # the bench names a CPU "cpu <arch>"
    err.print(f"# {describe(prov, row.status if row else None, cpu)}", highlight=False, markup=False)
    out.file.write(source if source.endswith("\n") else source + "\n")
    out.file.flush()


def register(app: typer.Typer) -> None:
    app.command("show")(show_command)
