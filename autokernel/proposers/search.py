"""The offline proposer: a model-based search over what a kernel file declares in SEARCH_SPACE, its
numbers (block sizes, warps, stages) and its structural switches (STRUCTURAL: persistent or one
tile per program, TMA, split-K, one- or two-pass statistics...) alike.

The model is an Optuna study per kernel (autokernel.proposers.study): TPE, random for its first
`startup` trials, then sampling where the good trials are denser than the bad ones. Before it, the
incumbent's ring: the kernel's current best (the source the loop hands over: the start, or what was
kept last) with one tunable moved one step (a number to the next value in its list, either way; a
structural switch or any other categorical to each other value), structural and numeric moves
alternating (the structural ones in the file's STRUCTURAL order, the numeric ones in a seeded
order). Up to `local` of a ring are tried before the study samples freely;
a keep moves the incumbent and opens a new ring. A tuned start's better neighbours are where a short
run (KernelBench's -k 3, a loop's first minutes) finds its gains; TPE's random start landed far off
(issue 18: 0 of 15 kept on LLaMA-7B, candidates at 0.12x of the start). Ring trials are enqueued in
the study, so TPE learns from them as from its own. Each proposal:
1. the study learns every verdict the store has that it lacks (kill -9 safe);
2. it is asked for a configuration of the tunables that matter for the kernel's dtype (from the
   ring while it is open);
3. a configuration already judged (its effective configuration's key is in the history) is never
   proposed again; one the file's valid_config or the device estimate (autokernel.declared) rejects
   is told to the study as infeasible and never compiled;
4. when the study keeps proposing what was tried (it has converged, or a small space is nearly
   done), an untried point one or two ring moves from the incumbent is enqueued ("near"), so the
   study still records it; failing that, one drawn at random from the whole space ("draw"); when
   none is left, SearchExhausted.

An abandoned experiment (the process died under it) has no verdict, so its configuration may be
tried again once; abandoned twice, it counts as tried (it may be what kills the process).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from autokernel.declared import effective_fn, fits_device, valid_config_fn
from autokernel.errors import KernelFileError
from autokernel.kernelfile import parse_source, with_config
from autokernel.orchestrator import config_key
from autokernel.proposers import study as studies
from autokernel.proposers.base import KernelContext, Proposal, SearchExhausted, history_config

__all__ = ["SearchProposer", "near_untried", "ring_of", "tried_configs", "valid_config_fn"]

ENUMERATE_UP_TO = 4096  # spaces this small are enumerated for exhaustion and fallback draws
# Asks of the study per proposal before an untried point is drawn directly. A converged TPE keeps
# re-proposing the points it believes best, which were judged already (their FAIL teaches it
# nothing): in an H200 llama-7b run 1673 of fused_mlp's 2054 trials were such repeats, ~50 ms an ask.
MAX_ASKS = 4
LOCAL = 8  # the incumbent's ring members tried before the study samples freely (0: none)


def tried_configs(history: Sequence[Any], part: Optional[Callable[[dict], dict]] = None,
                  start: Optional[dict] = None, run_id: Optional[int] = None) -> set[str]:
    """Keys of the (effective) configurations the history judged, or that run `run_id` is judging
    now (its running rows: a pool's candidates in flight); abandoned twice counts."""
    abandoned: Counter = Counter()
    tried = set()
    for exp in history:
        cfg = {**(start or {}), **history_config(exp)}
        key = config_key(part(cfg) if part is not None else cfg)
        if exp.status == "abandoned":
            abandoned[key] += 1
            if abandoned[key] >= 2:
                tried.add(key)
        elif exp.status != "running" or (run_id is not None and exp.run_id == run_id):
            tried.add(key)
    return tried


def in_flight(history: Sequence[Any], part: Callable[[dict], dict], start: dict, run_id: Optional[int]) -> set[str]:
    """Keys of the configurations run `run_id` is judging now (its running rows)."""
    return {config_key(part({**start, **history_config(e)})) for e in history
            if e.status == "running" and run_id is not None and e.run_id == run_id}


class SearchProposer:
    name = "search"
    writes_source = False

    def __init__(self, seed: int = 0, study_path: Optional[Path] = None, startup: int = 8, local: int = LOCAL):
        self.seed = seed
        self.study_path = Path(study_path) if study_path is not None else None
        self.startup = startup
        self.local = local
        self.rejected: Counter = Counter()  # kernel -> configurations rejected before compiling
        self._studies: dict[str, Any] = {}  # open studies of this process, by name
        self.last_trial: Optional[int] = None  # the study's trial number of the last proposal
        studies.optuna_module()  # a missing Optuna stops the command before the profile, in one line

    def propose(self, source: str, spec: Any = None, history: Sequence[Any] = (), last_result: Any = None, *,
                kernel: Optional[KernelContext] = None) -> Proposal | list[Proposal]:
        """One proposal, or kernel.batch of them (a pool's free judges): the study is asked once
        per candidate, the ones in flight known to it as running trials (TPE's constant liar keeps
        a batch spread out)."""
        kf = parse_source(source)
        space = kf.search_space
        if not space:
            raise SearchExhausted("the kernel file declares no SEARCH_SPACE")
        dtype = kernel.dtype if kernel is not None else "bfloat16"
        label = kernel.name if kernel is not None else kf.kernel_type
        run_id = kernel.run_id if kernel is not None else None
        shapes = getattr(kernel, "shapes", None) or None
        part = effective_fn(source, dtype, shapes)  # what a configuration is, as the loop keys it
        start = part(kf.config)
        names = list(start)  # the study's parameters
        valid = valid_config_fn(source) or (lambda cfg: True)
        tried = tried_configs(history, part, kf.config, run_id) | {config_key(start)}
        seed = self.seed * 1_000_003 + int.from_bytes(hashlib.sha256(label.encode()).digest()[:4], "big")
        name = studies.study_name(label, dtype, space, names)
        if name not in self._studies:
            self._studies[name] = studies.open_study(name, self.study_path, seed, self.startup)
        study = self._studies[name]
        studies.sync(study, history, space, names, kf.config, in_flight(history, part, kf.config, run_id),
                     key_of=lambda cfg: config_key(part(cfg)))
        n = max(1, kernel.batch if kernel is not None else 1)
        if kernel is not None and kernel.max_candidates:
            n = min(n, kernel.max_candidates)
        ring = self._ring_members(ring_of(kf.config, space, names, kf.structural, seed) if self.local > 0 else [],
                                  part, valid, dtype)
        out: list[Proposal] = []
        for _ in range(n):
            try:
                point = self._ring_point(ring, tried)
                if point is not None:
                    out.append(self._enqueued(study, source, kf, space, names, part, tried, point))
                    continue
                out.append(self._ask(study, source, kf, space, names, part, tried, valid, dtype, label, seed))
            except SearchExhausted:
                if not out:
                    raise
                break
        return out[0] if n == 1 else out

    @staticmethod
    def _ring_members(ring, part, valid, dtype) -> list[tuple[dict, str]]:
        """(configuration, key) of the ring members the file and the device accept (the others are
        never compiled and do not count), checked once per proposal, not once per candidate."""
        members = []
        for cfg in ring:
            eff = part(cfg)
            if valid(cfg) and fits_device(eff, dtype) is None:
                members.append((cfg, config_key(eff)))
        return members

    def _ring_point(self, members, tried) -> Optional[dict]:
        """The next untried member of the incumbent's ring while fewer than `local` of it were
        tried; None once the ring is closed."""
        if sum(key in tried for _cfg, key in members) >= self.local:
            return None
        return next((cfg for cfg, key in members if key not in tried), None)

    def _enqueued(self, study, source, kf, space, names, part, tried, cfg) -> Proposal:
        """A ring member as the study's next trial (enqueued, so TPE learns its verdict). A trial a
        killed process enqueued and never asked comes out first: it is failed and asked past."""
        params = studies.encode(space, cfg, names)
        study.enqueue_trial(params, skip_if_exists=False)
        trial = study.ask(studies.distributions(space, names))
        while trial.params != params:
            study.tell(trial, state=studies.optuna_module().trial.TrialState.FAIL)
            trial = study.ask(studies.distributions(space, names))
        key = config_key(part(cfg))
        trial.set_user_attr("key", key)
        tried.add(key)
        self.last_trial = trial.number
        return Proposal(source=with_config(source, cfg), description=self._describe(trial.number, kf, cfg, "ring"),
                        config=cfg)

    def _ask(self, study, source, kf, space, names, part, tried, valid, dtype, label, seed) -> Proposal:
        """One untried, valid configuration from the study (its key joins `tried`)."""
        dists = studies.distributions(space, names)
        optuna = studies.optuna_module()

        def accept(cfg: dict) -> bool:  # an untried configuration the file and the device accept
            eff = part(cfg)
            return config_key(eff) not in tried and valid(cfg) and fits_device(eff, dtype) is None

        for attempt in range(MAX_ASKS + 1):
            how = "tpe"
            if attempt == MAX_ASKS:
                point, how = near_untried(kf.config, space, names, kf.structural, tried, accept, seed), "near"
                if point is None:
                    point, how = self._untried(space, names, kf.config, len(tried), accept, seed), "draw"
                if point is None:
                    raise SearchExhausted(f"search space of {kf.kernel_type} exhausted "
                                          f"({len(tried)} configurations tried)")
                study.enqueue_trial(studies.encode(space, point, names), skip_if_exists=False)
            trial = study.ask(dists)
            cfg = {**kf.config, **studies.decode(space, trial.params)}
            eff = part(cfg)
            key = config_key(eff)
            why = None if valid(cfg) else "its valid_config rejects it"
            why = why or fits_device(eff, dtype)
            if why is not None:
                self.rejected[label] += 1
                trial.set_user_attr("key", key)
                trial.set_user_attr("rejected", why)
                trial.set_constraint(studies.CONSTRAINT, studies.INFEASIBLE)
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
            tried.add(key)
            self.last_trial = trial.number
            return Proposal(source=new_source,
                            description=self._describe(trial.number, kf, cfg, how),
                            config=cfg)
        raise SearchExhausted(f"search space of {kf.kernel_type} exhausted")  # not reached

    @staticmethod
    def _describe(number: int, kf, cfg: dict, how: str) -> str:
        changed = [k for k in cfg if kf.config.get(k) != cfg[k]]
        structure = [f"{k}={cfg[k]!r}" for k in changed if k in kf.structural]
        numbers = [f"{k}={cfg[k]!r}" for k in changed if k not in kf.structural]
        text = f"{how} #{number}: " + (", ".join(numbers) or "same numbers")
        return text + (f"; structure {', '.join(structure)}" if structure else "")

    @staticmethod
    def _untried(space, names, start, n_tried: int, accept, seed) -> Optional[dict]:
        """A random configuration `accept` takes (untried, passing the checks), or None when there is none."""
        rng = random.Random(seed + n_tried)
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
            if accept(cfg):
                return cfg
        return None


def near_untried(config: dict, space: dict[str, list], names: Sequence[str], structural: Sequence[str],
                 tried: set, accept, seed: int) -> Optional[dict]:
    """An untried configuration one or two ring moves from the incumbent `config` (one move first),
    in a seeded random order; None when all of them were tried or are rejected by `accept`.

    A study that only re-proposes judged points says where it believes the good region is: around
    its best, whose untried points are one or two moves from the incumbent. Uniform draws over the
    whole space landed far off (an H200 llama-7b run: 72 of 72 fused_mlp draws stopped at the screen)."""
    moves = ring_of(config, space, names, structural, seed)
    rng = random.Random(seed + len(tried))
    one = list(moves)
    rng.shuffle(one)
    for cfg in one:
        if accept(cfg):
            return cfg
    changed = [next(n for n in names if m[n] != config.get(n)) for m in moves]
    two = [(i, j) for i in range(len(moves)) for j in range(i + 1, len(moves)) if changed[i] != changed[j]]
    rng.shuffle(two)
    for i, j in two:
        cfg = {**moves[i], changed[j]: moves[j][changed[j]]}
        if studies.encode(space, cfg, names) is not None and accept(cfg):
            return cfg
    return None


def ring_of(config: dict, space: dict[str, list], names: Sequence[str], structural: Sequence[str],
            seed: int) -> list[dict]:
    """The incumbent `config` with one tunable of `names` moved one step: an ordered number to its
    neighbours in the declared list, a categorical to each other value. Structural and numeric
    moves alternate: the structural ones in the order the file's STRUCTURAL lists them (its author's
    word on which switch matters most: matmul's fp32 precision before its B layout), the numeric
    ones in a seeded order (the same incumbent, the same ring). Values of the incumbent outside the
    declared space are moved from nowhere: such a name is left out, and a member the study cannot
    encode is dropped."""
    moves: dict[bool, list[dict]] = {True: [], False: []}
    for n in names:
        values, cur = space[n], config.get(n)
        if cur not in values:
            continue
        i = values.index(cur)
        steps = [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)] if studies.ordered(values) \
            else [v for v in values if v != cur]
        for v in steps:
            cfg = {**config, n: v}
            if studies.encode(space, cfg, names) is not None:
                moves[n in structural].append(cfg)
    order = {n: i for i, n in enumerate(structural)}
    moves[True].sort(key=lambda cfg: order[next(n for n in names if cfg[n] != config[n])])  # stable
    random.Random(seed * 7 + 11).shuffle(moves[False])
    out = []
    for a, b in itertools.zip_longest(moves[True], moves[False]):
        out += [m for m in (a, b) if m is not None]
    return out
