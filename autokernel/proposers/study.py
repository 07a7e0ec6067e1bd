"""The search's model of a kernel's space: an Optuna study (TPE), kept in a journal file under the home.

One study per kernel, dtype and declared space (its name carries a digest of the space, so a file
that declares another space starts a new one). Every tunable that matters for the kernel's dtype
(autokernel.declared.effective_names) is a parameter: an ordered numeric list as an integer index
(TPE then sees that 64 lies between 32 and 128), anything else (variants, structural switches such
as persistent or one tile per program) as a categorical. The objective, minimized, is
log(time / the run's starting time) at the kernel's heaviest model shape, so full judgements and
screened candidates (timed only there) land on one scale; a candidate that failed (incorrect,
crashed, timed out) or that its file's valid_config or the device rejects is an infeasible trial
(constraint > 0), which TPE ranks below every feasible one; so is one the screen found to run the
best's very program (a repeat, with a smaller constraint: better than a failure, never good). A row
is scored against its run's start as timed on the row's own device.

The store's experiment rows are the truth; the study is rebuilt from them as needed: at every
proposal, trials still running (the previous candidate, or one a killed process left) are told
their experiment's verdict, or failed when it has none, and judged configurations the study lacks
(older runs, another agent, a deleted studies file) are added. So `--resume` continues the same
study after a kill -9, and nothing the store knows is lost to the model.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from autokernel import objective
from autokernel.errors import ConfigError
from autokernel.orchestrator import config_key
from autokernel.proposers.base import history_config
from autokernel.screening import SAME_PROGRAM

FAILED = ("incorrect", "crashed", "timeout")
JUDGED = ("kept", "reverted", "screened", "baseline") + FAILED
CONSTRAINT = "failed"  # the trial's constraint name: 0 feasible, above 0 infeasible
INFEASIBLE = 1.0  # failed (incorrect, crashed, timed out) or rejected before compiling
# The best's very program under another configuration (left at the screen, timed as the best):
# scored as the best, such rows filled TPE's good group with the best's clones, so it kept
# proposing the best's settings with unread tunables moved (H100 run 9: 422 of matmul's 772
# candidates). Infeasible, but ranked above a failure where TPE must take infeasible ones.
REPEAT = 0.5


def optuna_module():
    # A missing Optuna (a GPU machine whose carried wheels lack it) would otherwise end a loop run
    # in a traceback from deep inside the proposer.
    try:
        import optuna
    except ImportError as exc:
        raise ConfigError(f"the search agent needs Optuna, which is not installed here: {exc}",
                          hint="pip install 'optuna>=5.0' (on a GPU machine: ../shared/device/wheels.sh "
                               "optuna, then carry .whl/)") from exc

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # library code: nothing printed
    return optuna


def ordered(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and values == sorted(values)


def distributions(space: dict[str, list], names: Sequence[str]) -> dict[str, Any]:
    optuna = optuna_module()
    out = {}
    for n in names:
        values = space[n]
        if ordered(values):
            out[n] = optuna.distributions.IntDistribution(0, len(values) - 1)
        else:
            out[n] = optuna.distributions.CategoricalDistribution(values)
    return out


def decode(space: dict[str, list], params: dict[str, Any]) -> dict[str, Any]:
    return {n: space[n][v] if ordered(space[n]) else v for n, v in params.items()}


def encode(space: dict[str, list], cfg: dict[str, Any], names: Sequence[str]) -> Optional[dict[str, Any]]:
    """The trial parameters of a configuration; None when a value is outside the declared space."""
    out = {}
    for n in names:
        if n not in cfg or cfg[n] not in space[n]:
            return None
        out[n] = space[n].index(cfg[n]) if ordered(space[n]) else cfg[n]
    return out


def study_name(kernel: str, dtype: str, space: dict[str, list], names: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps([space, list(names)], sort_keys=True, default=str).encode()).hexdigest()
    return f"{kernel}|{dtype}|{digest[:12]}"


def open_study(name: str, path: Optional[Path], seed: int, startup: int):
    """The study `name` in the journal file `path` (in memory without one), created when new.

    A journal (Optuna's JournalStorage: one JSON line appended per change, under a file lock), not
    SQLite: the RDB storage committed every suggested parameter through SQLAlchemy, over 40% of a
    proposal's time (a proposal took 0.26-0.68 s over 500 trials on a 2-core CPU, as long as a GPU
    screen of the candidate: benchmarks/propose_cost.py)."""
    optuna = optuna_module()
    storage = None
    if path is not None:
        storage = journal_storage(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate TPE is marked experimental
        # constant_liar: trials still running (a pool's batch in flight) count as bad ones, so one
        # batch is spread out instead of asking the same region N times
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True,
                                             warn_independent_sampling=False, constant_liar=True)
    return optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize",
                               load_if_exists=True)


def journal_storage(path: Path):
    """The journal at `path`. Its data is a cache of the store's verdicts (sync rebuilds what is
    missing), so a damaged file is never a reason to stop a loop: a torn last line (a crash inside
    a write) is cut off, and a file Optuna cannot read is moved aside (kept, as `<name>.damaged`)
    and a new one begun."""
    optuna = optuna_module()
    from optuna.storages.journal import JournalFileBackend

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
    try:
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    except ValueError:  # json.JSONDecodeError is one; Optuna raises ValueError for a line without an end
        path.replace(path.with_name(path.name + ".damaged"))
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


def row_value(exp, starts: dict[tuple[Optional[int], Optional[str]], Any]) -> Optional[tuple[float, float]]:
    """(objective, constraint) of a judged row, scored against its own run's starting point timed
    on the row's own device (a run resumed on another card times its start again there: a row is
    never scored with another card's clock); None when nothing comparable was timed."""
    if exp.status in FAILED:
        return 0.0, INFEASIBLE
    start = starts.get((exp.run_id, exp.device))
    if start is None or not start.latency_us:
        return None
    repeat = exp.status == "screened" and (exp.error or "").startswith(SAME_PROGRAM)
    base_rows = objective.per_shape(start.details_json)
    heavy = objective.heaviest(base_rows)
    if exp.status == "screened":
        base = objective.time_at(base_rows, heavy.get("shape")) if heavy else None
        t = exp.screen_us
    else:
        mine = objective.per_shape(exp.details_json)
        t = objective.time_at(mine, heavy.get("shape")) if heavy else None
        base = objective.time_at(base_rows, heavy.get("shape")) if heavy and t else None
        if not (t and base):
            t, base = exp.latency_us, start.latency_us
    if not (t and base and t > 0 and base > 0):
        return None
    return math.log(t / base), (REPEAT if repeat else 0.0)


def sync(study, history: Sequence[Any], space: dict[str, list], names: Sequence[str],
         start_config: dict[str, Any], in_flight: Optional[set] = None,
         key_of: Optional[Callable[[dict], str]] = None) -> None:
    """Bring the study up to date with the store (see the module docstring); trials whose key is
    `in_flight` (a pool is judging them now) stay running. `key_of`: a configuration's key as the
    proposer records it (by default, its values of `names`)."""
    key_of = key_of or (lambda cfg: config_key({n: cfg.get(n) for n in names}))
    optuna = optuna_module()
    starts = {(e.run_id, e.device): e for e in history if e.status == "baseline" and e.latency_us}
    # the last judged row of each configuration; scored only where the study lacks its verdict (a
    # running trial, a configuration it never saw), not all of them at every proposal
    judged: dict[str, tuple[dict, Any]] = {}
    for e in history:
        if e.status in JUDGED:
            cfg = {**start_config, **history_config(e)}
            judged[key_of(cfg)] = (cfg, e)
    dists = distributions(space, names)
    known = set()
    for t in study.get_trials(deepcopy=False):
        key = t.user_attrs.get("key")
        if t.state == optuna.trial.TrialState.RUNNING:
            got = row_value(judged[key][1], starts) if key in judged else None
            if got is None and key in (in_flight or ()):
                continue
            if got is None:
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
                continue
            trial = optuna.trial.Trial(study, t._trial_id)
            trial.set_constraint(CONSTRAINT, got[1])
            study.tell(trial, got[0])
            known.add(key)
        elif t.state == optuna.trial.TrialState.COMPLETE:
            known.add(key)
    for key, (cfg, e) in judged.items():
        if key in known:
            continue
        got = row_value(e, starts)
        params = encode(space, cfg, names) if got is not None else None
        if params is None:
            continue
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, value=got[0], user_attrs={"key": key, "source": "store"},
            constraints={CONSTRAINT: got[1]}))
