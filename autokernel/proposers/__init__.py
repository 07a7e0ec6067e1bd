"""Proposers: where candidate kernel files come from. `search` explores a file's declared space
offline; `llm` asks a model over HTTP. Both implement base.Proposer."""

from __future__ import annotations

from autokernel.errors import ConfigError
from autokernel.proposers.base import KernelContext, Proposal, Proposer, SearchExhausted

AGENTS = ("search", "llm")


def make_proposer(agent: str, **options) -> Proposer:
    """Build the proposer named by --agent; options are the llm's (store, run_id, provider, model...)."""
    if agent == "search":
        from autokernel.proposers.search import SearchProposer

        return SearchProposer(**{k: v for k, v in options.items() if k in ("seed", "spread")})
    if agent == "llm":
        from autokernel.proposers.llm import LLMProposer

        return LLMProposer(**{k: v for k, v in options.items() if k not in ("seed", "spread")})
    raise ConfigError(f"unknown agent {agent!r}; use one of {', '.join(AGENTS)}")


__all__ = ["AGENTS", "KernelContext", "Proposal", "Proposer", "SearchExhausted", "make_proposer"]
