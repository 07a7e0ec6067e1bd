"""The proposer interface: given the kernel file, its spec, the history and the last result,
return the next candidate file (or a list of candidates, judged as one batch), or raise
ProposerError.

`SearchExhausted` (a ProposerError) means "nothing left to try for this kernel": the orchestrator
stops scheduling the kernel. Any other ProposerError (e.g. an LLM reply without code) is a
failed attempt: the loop records it and goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Sequence

from autokernel.errors import ProposerError


class SearchExhausted(ProposerError):
    """Every candidate this proposer can make for the kernel has been tried."""


@dataclass
class Proposal:
    source: str  # the whole new kernel file
    description: str  # one line, goes into the experiment row and the commit message
    config: dict[str, Any] = field(default_factory=dict)  # the candidate's tunables
    quick: bool = False  # screen with a quick bench first; the full judgement only when promising
    llm_call_id: Optional[int] = None  # the llm_calls row that produced it, linked to the experiment


@dataclass
class KernelContext:
    """What a proposer may know about the kernel besides its file (all plain values)."""

    name: str
    kernel_type: str
    backend: str
    dtype: str
    shapes: list[dict] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    kernel_id: Optional[int] = None
    run_id: Optional[int] = None
    share: float = 0.0  # of the model's GPU time (1.0 for a KernelBench problem)
    ceilings: Optional[dict[str, float]] = None  # this device's measured ceilings; None without a GPU
    device: str = ""  # what the timings are: "NVIDIA H200", "cpu x86_64 (Triton interpreter)"
    best_per_shape: list[dict] = field(default_factory=list)  # the best version's per-shape timings
    changes: dict[int, str] = field(default_factory=dict)  # experiment id -> what it changed (diff or config)
    failed_diff: Optional[str] = None  # the latest experiment's change when it failed (against the current file)
    max_candidates: Optional[int] = None  # how many candidates the loop can still judge in this run
    batch: int = 1  # how many candidates the loop judges at once now (a pool's free judges)


class Proposer(Protocol):
    name: str
    # whether its proposals are new source (not only new values of the file's declared tunables):
    # without a GPU the judge then also compiles them for sm_90 (the interpreter runs code the
    # compiler rejects)
    writes_source: bool

    def propose(self, source: str, spec: Any, history: Sequence[Any], last_result: Any = None, *,
                kernel: Optional[KernelContext] = None) -> Proposal | list[Proposal]: ...


def history_config(exp) -> dict[str, Any]:
    try:
        return json.loads(exp.config_json or "{}")
    except json.JSONDecodeError:
        return {}
