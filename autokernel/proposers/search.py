"""The offline proposer: explores the tunables a kernel file declares in SEARCH_SPACE.

Strategy (successive halving, then hill climbing):
1. Spread: a Latin-hypercube sample of the space (`spread` points, fixed by the seed and the
   space, so a resumed run draws the same ones). Each is proposed with quick=True: the loop
   screens it with a quick bench and gives it the full judgement only when it beats the best —
   the first rung of successive halving, where most of the space is thrown away cheaply.
2. Hill climbing around the current best (the branch head: keep advances it): one-parameter
   neighbours (adjacent values of ordered tunables, every other value of VARIANT-like ones), then
   two-parameter neighbours.
3. The rest of the space in a shuffled order when it is small (<= 4096 points), else up to
   `max_random` random points.
Then SearchExhausted.

Nothing is remembered in memory: the tried configurations come from the experiment history
(experiments.config_json of the kernel, all runs), so a restart never repeats one. An abandoned
experiment (the process died under it) has no verdict, so its configuration may be tried again
once; abandoned twice, it counts as tried (it may be what kills the process).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import itertools
import random
from collections import Counter
from typing import Any, Callable, Optional, Sequence

from autokernel.errors import KernelFileError
from autokernel.kernelfile import parse_source, with_config
from autokernel.orchestrator import config_key
from autokernel.proposers.base import KernelContext, Proposal, SearchExhausted, history_config

_SAFE_BUILTINS = {n: getattr(builtins, n) for n in (
    "abs", "all", "any", "bool", "dict", "float", "int", "isinstance", "len", "list", "max", "min",
    "range", "round", "set", "sorted", "str", "sum", "tuple", "zip", "True", "False", "None")
    if hasattr(builtins, n)}


_CONST_NODES = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Name, ast.Load, ast.Tuple, ast.List,
                ast.operator, ast.unaryop)


def _constant_assignment(node: ast.stmt) -> bool:
    """NAME = <literals and names combined by arithmetic>, nothing that calls or imports."""
    if isinstance(node, ast.AnnAssign):
        targets, value = [node.target], node.value
    elif isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    else:
        return False
    return (value is not None and all(isinstance(t, ast.Name) for t in targets)
            and all(isinstance(n, _CONST_NODES) for n in ast.walk(value)))


def valid_config_fn(source: str) -> Optional[Callable[[dict], bool]]:
    """The file's valid_config(cfg), compiled alone with a few pure builtins: the search decides
    validity without importing the kernel (no triton, no module-level side effects, nothing that
    can read the environment)."""
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "valid_config"), None)
    if node is None:
        return None
    ns: dict[str, Any] = {"__builtins__": _SAFE_BUILTINS}
    # valid_config may read the file's module-level constants (SMEM_LIMIT = 227 * 1024, ...): those
    # whose value is pure arithmetic on literals and earlier such constants come along.
    for const in (n for n in tree.body if _constant_assignment(n)):
        try:
            exec(compile(ast.Module(body=[const], type_ignores=[]), "<constant>", "exec"), ns)
        except Exception:  # refers to something imported or computed: valid_config must do without
            pass
    exec(compile(ast.Module(body=[node], type_ignores=[]), "<valid_config>", "exec"), ns)
    fn = ns["valid_config"]

    def check(cfg: dict) -> bool:
        try:
            return bool(fn(dict(cfg)))
        except Exception:
            return False

    return check


def _ordered(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def latin_hypercube(space: dict[str, list], n: int, rng: random.Random) -> list[dict]:
    """n points; in every dimension each of n equal strata of the value list is hit once."""
    names = list(space)
    cols = {}
    for name in names:
        values = space[name]
        strata = list(range(n))
        rng.shuffle(strata)
        cols[name] = [values[min(len(values) - 1, int((s + rng.random()) / n * len(values)))] for s in strata]
    return [{name: cols[name][i] for name in names} for i in range(n)]


def tried_configs(history: Sequence[Any]) -> set[str]:
    abandoned = Counter()
    tried = set()
    for exp in history:
        key = config_key(history_config(exp))
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

    def __init__(self, seed: int = 0, spread: int = 8, max_random: int = 64):
        self.seed = seed
        self.spread = spread
        self.max_random = max_random

    def _candidates(self, space: dict[str, list], best: dict[str, Any], rng_seed: int):
        """(phase, description, config) in the order they should be tried."""
        rng = random.Random(rng_seed)
        for i, cfg in enumerate(latin_hypercube(space, self.spread, rng)):
            yield True, f"spread {i + 1}/{self.spread}", cfg
        moves = []
        for name, values in space.items():
            if best.get(name) not in values:
                continue
            i = values.index(best[name])
            if _ordered(values):
                moves.append([(name, values[j]) for j in (i + 1, i - 1) if 0 <= j < len(values)])
            else:
                moves.append([(name, v) for v in values if v != best[name]])
        singles = [m for ms in moves for m in ms]
        for name, v in singles:
            yield False, f"hill-climb {name} {best[name]!r}->{v!r}", {**best, name: v}
        for (n1, v1), (n2, v2) in itertools.combinations(singles, 2):
            if n1 != n2:
                yield False, f"hill-climb {n1} {best[n1]!r}->{v1!r}, {n2} {best[n2]!r}->{v2!r}", {**best, n1: v1, n2: v2}
        names = list(space)
        size = 1
        for n in names:
            size *= len(space[n])
        if size <= 4096:  # small spaces are finished exhaustively, in a shuffled order
            points = [dict(zip(names, combo)) for combo in itertools.product(*(space[n] for n in names))]
            rng.shuffle(points)
        else:
            points = [{n: rng.choice(space[n]) for n in names} for _ in range(self.max_random)]
        for i, cfg in enumerate(points):
            yield False, f"space point {i + 1}", cfg

    def propose(self, source: str, spec: Any = None, history: Sequence[Any] = (), last_result: Any = None, *,
                kernel: Optional[KernelContext] = None) -> Proposal:
        kf = parse_source(source)
        space = kf.search_space
        if not space:
            raise SearchExhausted("the kernel file declares no SEARCH_SPACE")
        valid = valid_config_fn(source) or (lambda cfg: True)
        tried = tried_configs(history)
        tried.add(config_key(kf.config))
        digest = hashlib.sha256(config_key(space).encode()).digest()
        rng_seed = self.seed * 1_000_003 + int.from_bytes(digest[:4], "big")
        seen = set()
        for quick, description, cfg in self._candidates(space, dict(kf.config), rng_seed):
            key = config_key(cfg)
            if key in tried or key in seen:
                continue
            seen.add(key)
            if not valid(cfg):
                continue
            try:
                new_source = with_config(source, cfg)
            except KernelFileError:
                continue
            changed = ", ".join(f"{k}={v!r}" for k, v in cfg.items() if kf.config.get(k) != v)
            desc = description if description.startswith("hill") else f"{description}: {changed}"
            return Proposal(source=new_source, description=desc, config=cfg, quick=quick)
        raise SearchExhausted(f"search space of {kf.kernel_type} exhausted ({len(tried)} configurations tried)")
