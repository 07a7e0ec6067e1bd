"""Proposers: where candidate kernel files come from. `search` explores a file's declared space
offline; `llm` asks a model over HTTP. Both implement base.Proposer."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Optional

from autokernel.config import Paths
from autokernel.errors import ConfigError
from autokernel.proposers.base import KernelContext, Proposal, Proposer, SearchExhausted

AGENTS = ("search", "llm")
DEFAULT_TEMPERATURE = 0.7


@dataclass
class LLMSettings:
    """The llm agent's options of a run (`loop` and `kb run` alike), kept in the run row so that a
    resumed run asks the same endpoint the same way; a resume's own options win."""

    llm_model: Optional[str] = None
    provider: Optional[str] = None
    candidates: Optional[int] = None  # answers per request, judged as one batch (default 1)
    temperature: Optional[float] = None  # default 0.7
    max_llm_calls: Optional[int] = None
    max_cost: Optional[float] = None  # USD
    llm_price: Optional[str] = None  # "IN,OUT" USD per million tokens

    def merged(self, stored: dict[str, Any]) -> "LLMSettings":
        return LLMSettings(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None
                              else stored.get(f.name) for f in fields(self)})

    def config(self) -> dict[str, Any]:
        return asdict(self)

    def proposer_options(self) -> dict[str, Any]:
        return dict(model=self.llm_model, provider=self.provider, candidates=self.candidates or 1,
                    temperature=DEFAULT_TEMPERATURE if self.temperature is None else self.temperature,
                    max_llm_calls=self.max_llm_calls, max_cost=self.max_cost, price=self.llm_price)


def make_proposer(agent: str, *, llm: Optional[LLMSettings] = None, **options) -> Proposer:
    """Build the proposer named by --agent, its whole configuration checked (the llm's endpoint,
    key, model, price and limits) before the caller does any other work. `options`: store (both:
    the search keeps its study beside it), run_id (the llm's); seed, startup (the search's)."""
    if agent == "search":
        from autokernel.proposers.search import SearchProposer

        store = options.get("store")
        # the study lives next to the store, under the home (Paths.studies)
        path = Paths(Path(store.path).parent).studies if store is not None else None
        return SearchProposer(study_path=path, **{k: v for k, v in options.items() if k in ("seed", "startup")})
    if agent == "llm":
        from autokernel.proposers.llm import LLMProposer

        opts = {k: v for k, v in options.items() if k not in ("seed", "startup")}
        kw = (llm or LLMSettings()).proposer_options()
        # an option given here (runs.check_common's provider and model) wins over an unset setting
        kw.update({k: v for k, v in opts.items() if v is not None or k not in kw})
        return LLMProposer(**kw)
    raise ConfigError(f"unknown agent {agent!r}; use one of {', '.join(AGENTS)}")


__all__ = ["AGENTS", "KernelContext", "LLMSettings", "Proposal", "Proposer", "SearchExhausted", "make_proposer"]
