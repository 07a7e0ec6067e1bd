"""The offline proposer: a model-based search over what a kernel file declares in SEARCH_SPACE, its
numbers (block sizes, warps, stages) and its structural switches (STRUCTURAL: persistent or one
tile per program, TMA, split-K, one- or two-pass statistics...) alike.

The model is an Optuna study per kernel (autokernel.proposers.study): TPE, random for its first
`startup` trials, then sampling where the good trials are denser than the bad ones. Each proposal:
1. the study learns every verdict the store has that it lacks (kill -9 safe);
2. it is asked for a configuration of the tunables that matter for the kernel's dtype;
3. a configuration already judged (its effective configuration's key is in the history) is never
   proposed again; one the file's valid_config or the device estimate (autokernel.declared) rejects
   is told to the study as infeasible and never compiled;
4. when the study keeps proposing what was tried (a small space nearly done), an untried point is
   drawn at random and enqueued, so the study still records it; when none is left, SearchExhausted.

An abandoned experiment (the process died under it) has no verdict, so its configuration may be
tried again once; abandoned twice, it counts as tried (it may be what kills the process).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections import Counter
from pathlib import Path
from typing import Any, Optional, Sequence

from autokernel.declared import effective, effective_names, fits_device, valid_config_fn
from autokernel.errors import KernelFileError
from autokernel.kernelfile import parse_source, with_config
from autokernel.orchestrator import config_key
from autokernel.proposers import study as studies
from autokernel.proposers.base import KernelContext, Proposal, SearchExhausted, history_config

__all__ = ["SearchProposer", "tried_configs", "valid_config_fn"]

ENUMERATE_UP_TO = 4096  # spaces this small are enumerated for exhaustion and fallback draws
MAX_ASKS = 16  # asks of the study per proposal before an untried point is drawn directly


def tried_configs(history: Sequence[Any], names: Optional[Sequence[str]] = None,
                  start: Optional[dict] = None) -> set[str]:
    """Keys of the (effective) configurations the history judged; abandoned twice counts."""
    abandoned: Counter = Counter()
    tried = set()
    for exp in history:
        cfg = {**(start or {}), **history_config(exp)}
        key = config_key({n: cfg.get(n) for n in names} if names is not None else cfg)
        if exp.status == "abandoned":
            abandoned[key] += 1
            if abandoned[key] >= 2:
                tried.add(key)
        elif exp.status != "running":
            tried.add(key)
    return tried


class SearchProposer:
    name = "search"
    writes_source = False

    def __init__(self, seed: int = 0, study_path: Optional[Path] = None, startup: int = 8):
        self.seed = seed
        self.study_path = Path(study_path) if study_path is not None else None
        self.startup = startup
        self.rejected: Counter = Counter()  # kernel -> configurations rejected before compiling
        self._studies: dict[str, Any] = {}  # open studies of this process, by name
        self.last_trial: Optional[int] = None  # the study's trial number of the last proposal

    def propose(self, source: str, spec: Any = None, history: Sequence[Any] = (), last_result: Any = None, *,
                kernel: Optional[KernelContext] = None) -> Proposal:
        kf = parse_source(source)
        space = kf.search_space
        if not space:
            raise SearchExhausted("the kernel file declares no SEARCH_SPACE")
        dtype = kernel.dtype if kernel is not None else "bfloat16"
        label = kernel.name if kernel is not None else kf.kernel_type
        names = effective_names(source, kf.config, dtype)
        valid = valid_config_fn(source) or (lambda cfg: True)
        tried = tried_configs(history, names, kf.config) | {config_key(effective(kf.config, names))}
        seed = self.seed * 1_000_003 + int.from_bytes(hashlib.sha256(label.encode()).digest()[:4], "big")
        name = studies.study_name(label, dtype, space, names)
        if name not in self._studies:
            self._studies[name] = studies.open_study(name, self.study_path, seed, self.startup)
        study = self._studies[name]
        studies.sync(study, history, space, names, kf.config)
        dists = studies.distributions(space, names)
        optuna = studies.optuna_module()
        for attempt in range(MAX_ASKS + 1):
            if attempt == MAX_ASKS:
                point = self._untried(space, names, kf.config, tried, valid, dtype, seed)
                if point is None:
                    raise SearchExhausted(f"search space of {kf.kernel_type} exhausted "
                                          f"({len(tried)} configurations tried)")
                study.enqueue_trial(studies.encode(space, point, names), skip_if_exists=False)
            trial = study.ask(dists)
            cfg = {**kf.config, **studies.decode(space, trial.params)}
            key = config_key(effective(cfg, names))
            why = None if valid(cfg) else "its valid_config rejects it"
            why = why or fits_device(effective(cfg, names), dtype)
            if why is not None:
                self.rejected[label] += 1
                trial.set_user_attr("key", key)
                trial.set_user_attr("rejected", why)
                trial.set_constraint(studies.CONSTRAINT, 1.0)
                study.tell(trial, 0.0)
                tried.add(key)
                continue
            if key in tried:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)  # judged before: never twice
                continue
            try:
                new_source = with_config(source, cfg)
            except KernelFileError:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                tried.add(key)
                continue
            trial.set_user_attr("key", key)
            self.last_trial = trial.number
            return Proposal(source=new_source, description=self._describe(trial.number, kf, cfg, attempt >= MAX_ASKS),
                            config=cfg)
        raise SearchExhausted(f"search space of {kf.kernel_type} exhausted")  # not reached

    @staticmethod
    def _describe(number: int, kf, cfg: dict, drawn: bool) -> str:
        changed = [k for k in cfg if kf.config.get(k) != cfg[k]]
        structure = [f"{k}={cfg[k]!r}" for k in changed if k in kf.structural]
        numbers = [f"{k}={cfg[k]!r}" for k in changed if k not in kf.structural]
        text = f"{'draw' if drawn else 'tpe'} #{number}: " + (", ".join(numbers) or "same numbers")
        return text + (f"; structure {', '.join(structure)}" if structure else "")

    def _untried(self, space, names, start, tried, valid, dtype, seed) -> Optional[dict]:
        """A random untried configuration that passes the checks, or None when there is none."""
        rng = random.Random(seed + len(tried))
        size = 1
        for n in names:
            size *= len(space[n])
        if size <= ENUMERATE_UP_TO:
            points = [dict(zip(names, combo)) for combo in itertools.product(*(space[n] for n in names))]
            rng.shuffle(points)
        else:
            points = ({n: rng.choice(space[n]) for n in names} for _ in range(ENUMERATE_UP_TO))
        for p in points:
            cfg = {**start, **p}
            if config_key(effective(cfg, names)) not in tried and valid(cfg) and fits_device(p, dtype) is None:
                return cfg
        return None
