"""What LLM calls cost, and whether a run may make another one.

Prices are per million tokens in US dollars, input and output, per model: `--llm-price IN,OUT` for
the model in use, or $AUTOKERNEL_LLM_PRICES, a JSON object {"model": [IN, OUT], ...} whose "*" entry
covers any other model. Nothing is built in: prices change, and a stale table would be worse than
none. Without a price a call's cost is unknown (None) and --max-cost is refused before the run starts.

A call's cost comes from the token counts the endpoint reports; an endpoint that reports none is
charged an estimate of four characters per token, so that --max-cost still holds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from autokernel.errors import ConfigError, ProposerError

PRICES_ENV = "AUTOKERNEL_LLM_PRICES"
CHARS_PER_TOKEN = 4.0


class LLMBudgetSpent(ProposerError):
    """The run's LLM budget (--max-llm-calls, --max-cost) is used up: not a failure, the loop stops
    cleanly with this as its reason."""


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float

    def cost(self, prompt_tokens: Optional[int], completion_tokens: Optional[int], prompt_chars: int = 0,
             reply_chars: int = 0) -> float:
        pt = prompt_tokens if prompt_tokens is not None else prompt_chars / CHARS_PER_TOKEN
        ct = completion_tokens if completion_tokens is not None else reply_chars / CHARS_PER_TOKEN
        return (pt * self.input_per_mtok + ct * self.output_per_mtok) / 1e6


def _price(value, where: str) -> Price:
    try:
        if isinstance(value, str):
            value = [float(v) for v in value.replace(":", ",").split(",")]
        if isinstance(value, dict):
            value = [value["input"], value["output"]]
        pin, pout = (float(v) for v in value)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{where}: a price is two numbers, USD per million input and output tokens "
                          f"(e.g. 3,15), not {value!r}") from exc
    if pin < 0 or pout < 0:
        raise ConfigError(f"{where}: prices cannot be negative")
    return Price(pin, pout)


def price_for(model: str, explicit: Optional[str] = None) -> Optional[Price]:
    """The price of `model`: --llm-price, else its entry (or "*") in $AUTOKERNEL_LLM_PRICES, else None."""
    if explicit:
        return _price(explicit, "--llm-price")
    raw = os.environ.get(PRICES_ENV, "").strip()
    if not raw:
        return None
    try:
        table = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{PRICES_ENV} is not JSON: {exc.msg}",
                          hint='e.g. {"my-model": [3, 15]} (USD per million input, output tokens)') from exc
    if not isinstance(table, dict):
        raise ConfigError(f"{PRICES_ENV} must be a JSON object of model -> [input, output]")
    entry = table.get(model, table.get("*"))
    return None if entry is None else _price(entry, f"{PRICES_ENV}[{model!r}]")


@dataclass
class Budget:
    """--max-llm-calls and --max-cost of a run, checked before each call against the store's rows
    (so a resumed run counts the calls it made before)."""

    max_calls: Optional[int] = None
    max_cost: Optional[float] = None

    def validate(self, price: Optional[Price], model: str) -> None:
        if self.max_calls is not None and self.max_calls < 1:
            raise ConfigError("--max-llm-calls must be at least 1")
        if self.max_cost is not None:
            if self.max_cost <= 0:
                raise ConfigError("--max-cost must be more than 0")
            if price is None:
                raise ConfigError(f"--max-cost needs the price of {model}",
                                  hint=f"pass --llm-price IN,OUT (USD per million tokens) or set {PRICES_ENV}")

    def check(self, calls: int, cost: float) -> None:
        if self.max_calls is not None and calls >= self.max_calls:
            raise LLMBudgetSpent(f"the LLM call limit is reached ({calls} of --max-llm-calls {self.max_calls})")
        if self.max_cost is not None and cost >= self.max_cost:
            raise LLMBudgetSpent(f"the LLM cost limit is reached (${cost:.4f} of --max-cost ${self.max_cost:g})")
