"""The CLI's consoles. Library code never prints; it returns values or raises typed errors.

On a terminal Rich fits tables to the window. Anywhere else (a pipe, `tee`, a log file, CI) there
is no width to fit: Rich would assume 80 columns and cut kernel names, shas and problem names
to `ker…`. There the consoles are unbounded, so every cell is printed whole.
"""

from rich.console import Console, ConsoleDimensions

UNBOUNDED_WIDTH = 100_000  # wider than any row; tables only take the width their cells need


class CLIConsole(Console):
    """A Console whose width is the terminal's on a terminal and unbounded elsewhere."""

    @property
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)
        if self.is_terminal or self._width is not None:
            return size
        return ConsoleDimensions(UNBOUNDED_WIDTH, size.height)

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)


out = CLIConsole(soft_wrap=True)
err = CLIConsole(stderr=True, soft_wrap=True)


def warn_if_unsandboxed() -> None:
    """Once per run: say so on stderr when candidates will run without the sandbox (and why)."""
    from autokernel.bench.sandbox import probe

    warning = probe().warning()
    if warning:
        err.print(f"[bold yellow]warning:[/] {warning}", highlight=False)
