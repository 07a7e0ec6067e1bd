"""Checks of option values that Typer's own `min=` cannot express; a bad value is a usage error
(exit code 2) naming the option, raised before the command touches any state."""

from __future__ import annotations

import math
from typing import Optional

import typer


def positive(ctx: typer.Context, param: typer.CallbackParam, value: Optional[float]) -> Optional[float]:
    """A number of hours or seconds: more than 0 (infinity allowed: no limit), never NaN."""
    if ctx.resilient_parsing or value is None:
        return value
    if math.isnan(value) or value <= 0:
        raise typer.BadParameter(f"must be more than 0, not {value:g}")
    return value
