"""Options several commands share (declared once, so `loop` and `kb run` cannot drift apart), and
checks of option values that Typer's own `min=` cannot express; a bad value is a usage error (exit
code 2) naming the option, raised before the command touches any state."""

from __future__ import annotations

import math
from typing import Annotated, Any, Optional

import typer


def positive(ctx: typer.Context, param: typer.CallbackParam, value: Optional[float]) -> Optional[float]:
    """A number of hours or seconds: more than 0 (infinity allowed: no limit), never NaN."""
    if ctx.resilient_parsing or value is None:
        return value
    if math.isnan(value) or value <= 0:
        raise typer.BadParameter(f"must be more than 0, not {value:g}")
    return value



def _shared(kind: type, flag: str, help: str) -> Any:
    """The type of an option declared once for several commands: `name: Candidates = None`."""
    return Annotated[Optional[kind], typer.Option(flag, help=help)]


# The LLM proposer's budget and sampling (autokernel.proposers.LLMSettings) and the Ray judge pool.
Candidates = _shared(int, "--candidates", "LLM answers per request, judged as one batch (default 1).")
Temperature = _shared(float, "--temperature", "LLM sampling temperature (default 0.7).")
MaxLLMCalls = _shared(int, "--max-llm-calls", "Stop the run cleanly after N LLM calls.")
MaxCost = _shared(float, "--max-cost", "Stop the run cleanly once its LLM calls cost USD (needs a price).")
LLMPrice = _shared(str, "--llm-price",
                   "IN,OUT: USD per million input and output tokens of --llm-model (or $AUTOKERNEL_LLM_PRICES).")
Ray = _shared(str, "--ray", "Judge on a Ray cluster: its ADDRESS, or local; one judge per GPU (or --workers N).")
