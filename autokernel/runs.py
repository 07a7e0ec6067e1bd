"""What a loop or kb run checks before it writes anything, and who may write to it.

Every option is validated before the first row is written: a run row created for options that are
then rejected would stay "running" forever and be what `--resume` picks next. One writer per run:
a run holds the store lock of its model (`loop:<model>`, `kb:<level key>`) from before it profiles
or extracts until it ends, so a second process on the same run or model is refused in one line
naming the holder's pid, and a lock whose holder died (kill -9) is taken over by the next run.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from autokernel.errors import ConfigError, NotFoundError


def _positive(name: str, value: Optional[float]) -> None:
    if value is not None and (not isinstance(value, (int, float)) or math.isnan(value) or value <= 0):
        raise ConfigError(f"{name} must be more than 0, not {value!r}")


def _at_least(name: str, value: Optional[int], low: int) -> None:
    if value is not None and (not isinstance(value, int) or value < low):
        raise ConfigError(f"{name} must be a whole number of at least {low}, not {value!r}")


def check_common(*, hours: Optional[float], timeout_s: Optional[float], agent: str,
                 provider: Optional[str], llm_model: Optional[str]) -> None:
    """The options a loop run and a kb run share. The agent's name is checked here; its settings (an
    llm agent without a model, with an unknown provider, a bad price) when the caller builds it, which
    both callers do next, before anything is written."""
    from autokernel.proposers import AGENTS

    _positive("--hours", hours)
    _positive("--timeout", timeout_s)
    if agent not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}; use one of {', '.join(AGENTS)}")


def check_loop_options(*, hours: Optional[float], max_experiments: Optional[int], agent: str,
                       kernels: Optional[list[str]], backend: str, batch: int, seq: Optional[int],
                       dtype: Optional[str], top: int, timeout_s: float, provider: Optional[str],
                       llm_model: Optional[str]) -> None:
    from autokernel.kernels import KERNEL_TYPES
    from autokernel.kernels.spec import dtype_name

    check_common(hours=hours, timeout_s=timeout_s, agent=agent, provider=provider, llm_model=llm_model)
    _at_least("--max-experiments", max_experiments, 1)
    _at_least("--top", top, 1)
    _at_least("--batch", batch, 1)
    _at_least("--seq", seq, 1)
    if backend not in ("triton", "cuda"):
        raise ConfigError(f"--backend must be triton or cuda, not {backend!r}")
    unknown = [t for t in kernels or [] if t not in KERNEL_TYPES]
    if unknown:
        raise ConfigError(f"unknown kernel type(s) {', '.join(unknown)} in --kernels",
                          hint=f"types: {', '.join(KERNEL_TYPES)}")
    if dtype is not None:
        try:
            dtype_name(dtype)
        except ValueError as exc:
            raise ConfigError(f"--dtype: {exc}") from None


def check_kb_options(*, level: Optional[int], experiments_per_problem: Optional[int], hours: Optional[float],
                     timeout_s: float, agent: str, provider: Optional[str], llm_model: Optional[str]) -> None:
    check_common(hours=hours, timeout_s=timeout_s, agent=agent, provider=provider, llm_model=llm_model)
    if level is not None and level not in (1, 2, 3, 4):
        raise ConfigError(f"--level must be 1-4, not {level!r}")
    _at_least("--experiments-per-problem", experiments_per_problem, 0)


def lock_key(kind: str, model: str) -> str:
    """The lock a run of `kind` on `model` holds: the kernels (branches) it writes are the model's."""
    return f"{kind}:{model}"


def lock_what(kind: str, model: str) -> str:
    """How a refusal names the lock's work."""
    return f"a kb run on {model.removeprefix('kb:')}" if kind == "kb" else f"a {kind} on {model}"


def latest_resumable_run(store: Any, kind: str):
    """The newest run of `kind` that got as far as an experiment. A run with none never started
    (older AutoKernel versions could leave one "running" after rejecting an option): resuming it
    would only fail again, so it is skipped."""
    for run in reversed(store.list_runs()):
        if run.kind == kind and store.list_experiments(run_id=run.id):
            return run
    raise NotFoundError(f"no {kind} run to resume", hint="start one with `autokernel kb run --level N`"
                        if kind == "kb" else f"start one with `autokernel {kind} --model M`")
