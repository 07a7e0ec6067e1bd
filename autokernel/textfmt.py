"""Small text helpers shared by the CLI tables, the prompts, the reports and error messages: a
number or a dash for a missing one, and the tail of a long text (a build log, a child's stderr)."""

from __future__ import annotations

from typing import Any

MISSING = "-"
TAIL_CHARS = 4000  # what an error message keeps of a long log: its end, where the cause is


def number(v: Any, spec: str = ".2f", suffix: str = "", *, missing: str = MISSING) -> str:
    """`v` in the format `spec` ('.2f', '.2e', ...) followed by `suffix`, or `missing` when v is None."""
    return missing if v is None else format(v, spec) + suffix


def tail(text: str, n: int = TAIL_CHARS) -> str:
    """The last `n` characters of `text`, marked with '...' where the start was cut."""
    return text if len(text) <= n else "..." + text[-n:]
