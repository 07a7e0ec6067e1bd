"""The `autokernel` command: one Typer app, command groups registered in the order of the flow
profile -> extract -> bench -> loop -> verify -> show -> export -> kb -> report."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from autokernel import __version__
from autokernel.config import debug_enabled, resolve_home, use_home

app = typer.Typer(
    name="autokernel",
    help="Profile a PyTorch model, extract its bottleneck kernels, optimize them unattended, verify the model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"autokernel {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    home: Optional[str] = typer.Option(None, "--home", help="State directory (default ./.autokernel or $AUTOKERNEL_HOME)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    ctx.obj = resolve_home(home)
    # every library call and child process of this command finds the same home (not only the ones
    # handed ctx.obj): the environment is put back when the command ends (in-process callers)
    ctx.call_on_close(use_home(ctx.obj))


# Each command module registers its commands on `app`; the order here is the order of --help.
# (each stage's module adds itself here as it lands, in flow order)
from autokernel.cli import bench as _bench  # noqa: E402
from autokernel.cli import export as _export  # noqa: E402
from autokernel.cli import kb as _kb  # noqa: E402
from autokernel.cli import extract as _extract  # noqa: E402
from autokernel.cli import loop as _loop  # noqa: E402
from autokernel.cli import profile as _profile  # noqa: E402
from autokernel.cli import verify as _verify  # noqa: E402
from autokernel.cli import report as _report  # noqa: E402
from autokernel.cli import show as _show  # noqa: E402

_COMMAND_MODULES: tuple = (_profile, _extract, _bench, _loop, _verify, _show, _export, _kb, _report)

for _module in _COMMAND_MODULES:
    _module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry: typed errors become one line on stderr and a distinct exit code."""
    from autokernel.errors import AutoKernelError

    try:
        app(args=argv, prog_name="autokernel")
    except AutoKernelError as exc:
        if debug_enabled():
            raise
        from autokernel.cli.console import err
        from autokernel.redact import redact

        # markup off for the message: an endpoint's error text may hold brackets
        err.print("[bold red]error:[/] ", end="", highlight=False)
        err.print(redact(exc.one_line()), markup=False, highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        from autokernel.cli.console import err

        err.print("interrupted")
        sys.exit(130)
