"""The CLI's consoles. Library code never prints; it returns values or raises typed errors."""

from rich.console import Console

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
