"""`autokernel kb run`: KernelBench problems through the same loop as `autokernel loop`.

Each problem is a kernel of the store (name kb.<source>.L<level>.<id>, type "kb") with a branch in
the workspace whose kernel.py is the problem's ModelNew (solutions.initial_solution). The
optimization is the loop's own machinery (loop_experiments.Loop: baseline row, proposer, worktree per
experiment, keep/revert, every experiment a store row, kill -9 safe), with three differences:
the judge is the KernelBench judge bound to the problem (evaluate.KBWorker), the proposer gets a
problem description instead of a kernel-type spec, and a problem stops after
`experiments_per_problem` experiments of this run. Problems are worked on one after another; a
problem that fails (bench error) is recorded and the next one starts.

Resumable: `--resume` takes the latest kb run (or a given one), marks rows a dead process left
"running" as abandoned, and goes on; problems that already have their experiments are skipped,
numbers come from the store, nothing is counted twice. Library code: events go to on_event.
"""

from __future__ import annotations

import functools
import json
import os

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from autokernel.errors import AutoKernelError, ConfigError, LLMError
from autokernel.kb.problems import Problem, checkout_root, load_problems, resolve_size, resolve_source, source_label
from autokernel.kb.score import problem_meta
from autokernel.loop import LoopEvent, cleanup_stale, reopen_run, run_guarded, stamped
from autokernel.loop_experiments import Loop, row_view
from autokernel.proposers import LLMSettings, make_proposer
from autokernel.runs import check_kb_options, latest_resumable_run, lock_key, lock_what

KERNEL_TYPE = "kb"


@dataclass
class KBRunSummary:
    run_id: int
    status: str  # finished | interrupted
    source: str
    source_label: str
    level: int
    agent: str
    problems: list[dict[str, Any]] = field(default_factory=list)
    experiments: int = 0
    kept: int = 0
    elapsed_s: float = 0.0
    stop_reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ProblemSpec:
    """What the proposers get where a kernel type would give its spec: the problem itself, its
    shapes and ops (kb.brief), and which judge's rules apply (the LLM prompt's judge_kb.md)."""

    judge = "kb"

    def __init__(self, problem: Problem):
        self.problem = problem
        self.name = KERNEL_TYPE
        self.description = (
            f"KernelBench {problem.label()}. What is judged is `class ModelNew` in kernel.py: built with "
            f"Model's constructor arguments right after the same seed as Model (so the same weights), it must "
            f"return Model's outputs within atol = rtol = 1e-4 (fp32; no fp16/bf16/TF32 shortcuts) on fresh "
            f"inputs, launch Triton kernels defined in kernel.py (torch library ops alone are rejected), and "
            f"never cache outputs or hide work on side streams. The judge takes Model, get_inputs and "
            f"get_init_inputs from the problem file below, never from kernel.py. The problem file:")
        self.reference = _Code(problem.code)

    @functools.cached_property
    def facts(self) -> str:
        """The problem's inputs, ops and minimum traffic (traced on first use: only the llm asks)."""
        from autokernel.kb.brief import problem_brief

        return problem_brief(self.problem).to_markdown()


class _Code:
    def __init__(self, code: str):
        self.code = code

    def __repr__(self) -> str:
        return self.code


class _KBLoop(Loop):
    """The loop on one problem: the proposer gets the problem instead of a kernel-type spec, and the
    loop stops after per_problem experiments on it (its time budget is the problem's share)."""

    BUDGET_SPENT = "its share of the time budget spent"
    NOTHING_LEFT = "nothing left to try"

    def __init__(self, *a, problem: Problem, per_problem: Optional[int], **kw):
        super().__init__(*a, **kw)
        self.problem = problem
        self.per_problem = per_problem
        self.problem_spec = ProblemSpec(problem)

    def count(self) -> int:
        return sum(1 for e in self.store.list_experiments(run_id=self.run.id) if e.proposer != "baseline"
                   and e.kernel_id in self.kernels)

    def spec(self, k):
        return self.problem_spec

    def experiment_limit(self) -> Optional[int]:
        return self.per_problem


def ensure_problem_kernel(store, workspace, problem: Problem, emit: Callable[[LoopEvent], None]):
    """The problem's kernel row and branch, created with the initial ModelNew when new."""
    from autokernel.kb.solutions import initial_solution

    k = store.find_kernel(problem.kernel_name)
    sol = initial_solution(problem)
    if k is not None and workspace.has_kernel(problem.kernel_name):
        return _refresh_start(store, workspace, k, sol, emit)
    emit(LoopEvent("stage", f"{problem.kernel_name}: {sol.describe()}", {"kernel": problem.kernel_name,
                                                                         "start": sol.kind}))
    base = None
    if not workspace.has_kernel(problem.kernel_name):
        base = workspace.add_kernel(problem.kernel_name, sol.source, f"{problem.label()}: {sol.describe()}")
    meta = {"shapes": [], "kb": {**problem.to_dict(), "start": sol.kind, "library": sol.library,
                                 "start_description": sol.describe(), "degenerate": None}}
    if k is None:
        k = store.add_kernel(problem.kernel_name, KERNEL_TYPE, backend="triton", model=_model_key(problem),
                             share=1.0, shapes=None, dtype="float32", branch=workspace.branch_name(problem.kernel_name),
                             base_commit=base or workspace.head(problem.kernel_name))
    return store.update_kernel(k.id, shapes_json=json.dumps(meta))


def _refresh_start(store, workspace, k, sol, emit):
    """A problem whose branch still holds its first start, from an older library (say a
    starter that has since learnt the problem's op), gets the start the library writes today;
    one that has kept experiments keeps them (the loop built on that start)."""
    name = k.name
    head = workspace.head(name)
    if head != k.base_commit or workspace.read(name) == sol.source:
        return k
    sha = workspace.advance(name, sol.source, f"{name}: library start updated: {sol.describe()}", head)
    emit(LoopEvent("stage", f"{name}: start updated from the library: {sol.describe()}",
                   {"kernel": name, "start": sol.kind}))
    kb = {**problem_meta(k), "start": sol.kind, "library": sol.library, "start_description": sol.describe()}
    return store.update_kernel(k.id, base_commit=sha, shapes_json=json.dumps({"shapes": [], "kb": kb}))


def _model_key(problem: Problem) -> str:
    return _level_key(problem.source, problem.level, problem.size)


def _level_key(source: str, level: int, size: str) -> str:
    """The model key of a level's kernels (and so of the lock a kb run on it holds)."""
    return f"kb:{source}:L{level}" + ("" if size == "default" else f":{size}")


def _record_degenerate(store, k, res) -> None:
    deg = (res.extra or {}).get("degenerate") if res is not None else None
    data = json.loads(k.shapes_json or "{}")
    if not isinstance(data, dict):
        data = {"shapes": data}
    kb = data.setdefault("kb", {})
    if deg is not None or "degenerate" not in kb or kb.get("degenerate") is None:
        kb["degenerate"] = deg
        store.update_kernel(k.id, shapes_json=json.dumps(data))


def kb_run(store, workspace, *, level: int | None = None, ids: list[int] | None = None, source: str | None = None,
           kb_path: str | None = None, size: str = "auto", experiments_per_problem: int | None = 3,
           hours: float | None = None, agent: str = "search", resume: bool | int = False,
           llm_model: str | None = None, provider: str | None = None, llm: LLMSettings | None = None,
           timeout_s: float = 600.0, worker=None, proposer=None, pool_options=None, pool=None,
           baselines: dict[str, dict] | None = None,
           on_event: Callable[[LoopEvent], None] | None = None) -> KBRunSummary:
    """pool_options (pool.PoolOptions: --gpus, --workers, --ray) spread the problems over a pool of
    judges (kb/pooled.py), but one GPU (--gpus 0) is the usual run with its worker pinned there; a
    given, started `pool` is used (and closed) instead. `baselines`: kernel name -> the problem's
    eager/compile times from the trusted harness (kb/baselines.py), handed to its judge so that
    the judge does not time them (one GPU only: a pool's judges each time their own device's)."""
    from autokernel.pool import PoolOptions

    emit = on_event or (lambda e: None)
    pooled = pool_options or PoolOptions()
    llm = LLMSettings(**(llm.config() if llm else {}))
    llm.llm_model, llm.provider = llm_model or llm.llm_model, provider or llm.provider
    run = None
    if resume:
        run = store.get_run(int(resume)) if not isinstance(resume, bool) else latest_resumable_run(store, "kb")
        if run.kind != "kb":
            raise ConfigError(f"run {run.id} is a {run.kind} run, not a kb run")
        opts = json.loads(run.config_json or "{}")
        level, ids, source = opts.get("level"), opts.get("ids"), opts.get("source")
        kb_path, size, agent = opts.get("kb_path") or kb_path, opts.get("size", size), run.agent or agent
        experiments_per_problem = opts.get("experiments_per_problem", experiments_per_problem)
        hours = hours if hours is not None else opts.get("hours")
        llm = llm.merged(opts)
        pooled = pooled.merged(opts)
    else:
        if level is None:
            raise ConfigError("--level is required (or --resume)")
        source = resolve_source(source, kb_path)
        size = resolve_size(size, source)
        if source == "checkout" and not kb_path:
            # the checkout $KERNELBENCH_PATH named: kept with the run, so that `kb score` later (that
            # variable unset) still counts the level's un-attempted problems in fast_p's denominator
            kb_path = checkout_root(None)
    # every option is checked, and the problems loaded, before anything is written
    check_kb_options(level=level, experiments_per_problem=experiments_per_problem, hours=hours,
                     timeout_s=timeout_s, agent=agent if proposer is None else "search", provider=llm.provider,
                     llm_model=llm.llm_model)
    pin = None  # one GPU: the run's own KernelBench worker, pinned there (no pool)
    if pool is None and worker is None:
        pooled.check()
        pin = pooled.one_gpu()
    problems = load_problems(source, kb_path, level=level, ids=ids, size=size)
    if proposer is None:  # a missing model name or key is said now, before any problem is judged
        proposer = make_proposer(agent, llm=llm, store=store)
    level_key = _level_key(source, level, size)  # the kernels (branches) this run writes
    key = lock_key("kb", level_key)
    with store.locked(key, what=lock_what("kb", level_key)):
        if run is not None:
            run = reopen_run(store, run, "kb", emit)
        else:
            run = store.create_run("kb", model=f"kb:{source}:L{level}", agent=agent, pid=os.getpid(), config={
                "level": level, "ids": ids, "source": source, "kb_path": str(kb_path) if kb_path else None,
                "size": size, "experiments_per_problem": experiments_per_problem, "hours": hours, **llm.config(),
                **pooled.config()})
        store.set_lock_run(key, run.id)
        if hasattr(proposer, "run_id"):
            proposer.run_id = run.id
        emit = stamped(emit, run.id)
        emit(LoopEvent("stage", f"kb run {run.id}: {len(problems)} problem(s) of level {level} from "
                                f"{source_label(source)}"))
        budget_s = (8.0 if hours is None else float(hours)) * 3600.0
        own_worker = worker is None
        try:
            cleanup_stale(workspace, emit)
            if own_worker and (pool is not None or (pooled.wanted and pin is None)):
                from autokernel.loop_pool import open_pool

                worker = pool or open_pool(store, emit, family="kb", **pooled.config())
            elif own_worker:
                from autokernel.kb.evaluate import KBWorker

                worker = KBWorker(env={**os.environ, **pin} if pin else None)
        except BaseException:
            if own_worker and worker is not None:
                worker.close()
            store.finish_run(run.id, "failed")
            raise

        def work() -> str:
            if hasattr(worker, "slots"):  # a pool: the problems judged side by side
                from autokernel.kb.pooled import run_pooled

                return run_pooled(store, workspace, run=run, problems=problems, pool=worker, agent=agent,
                                  proposer=proposer, budget_s=budget_s, per_problem=experiments_per_problem,
                                  timeout_s=timeout_s, emit=emit)
            for i, p in enumerate(problems, 1):
                emit(LoopEvent("problem", f"[{i}/{len(problems)}] {p.label()}", {"index": i, "total": len(problems),
                                                                                "kernel": p.kernel_name}))
                try:
                    k = ensure_problem_kernel(store, workspace, p, emit)
                    # fair share: this problem may use the budget left divided by the problems left, so
                    # experiments on the first problems never starve the starting points of the last ones
                    spent = time_spent(store, run.id)
                    share = spent + max(0.0, budget_s - spent) / (len(problems) - i + 1)
                    loop = _KBLoop(store, workspace, run=run, kernels=[k], agent=agent, proposer=proposer,
                                   judge=worker.judge_for(p, gpu_compile=proposer.writes_source,
                                                          baselines=(baselines or {}).get(p.kernel_name)),
                                   budget_s=share,
                                   max_experiments=None, timeout_s=timeout_s, on_event=emit, problem=p,
                                   per_problem=experiments_per_problem)
                    loop.reconcile()
                    loop.baselines()
                    base = next((e for e in store.list_experiments(run_id=run.id, kernel_id=k.id)
                                 if e.proposer == "baseline" and e.status != "abandoned"), None)
                    if k.id in loop.last_result:
                        _record_degenerate(store, store.get_kernel(k.id), loop.last_result[k.id])
                    why = loop.run_budget()
                    emit(LoopEvent("problem_done", f"{p.kernel_name}: {why}",
                                   {"kernel": p.kernel_name, "baseline": row_view(base) if base else None}))
                    if loop.llm_budget_spent:
                        return why
                except KeyboardInterrupt:
                    raise
                except AutoKernelError as exc:  # one problem failing does not stop the run...
                    if isinstance(exc, LLMError) and exc.fatal:
                        raise  # ...but an endpoint that refuses the configuration stops it
                    emit(LoopEvent("problem_failed", f"{p.kernel_name}: {exc.one_line()}", {"kernel": p.kernel_name}))
                except Exception as exc:  # nor does anything unexpected in it (the run goes on; the error is shown)
                    emit(LoopEvent("problem_failed", f"{p.kernel_name}: {type(exc).__name__}: {exc}"[:2000],
                                   {"kernel": p.kernel_name}))
                if time_spent(store, run.id) >= budget_s:
                    return "time budget spent"
            return "every problem done"

        status, reason = run_guarded(store, run.id, work, worker if own_worker else None)
        store.finish_run(run.id, status)
    return summarize_run(store, run.id, status=status, reason=reason)


def time_spent(store, run_id: int) -> float:
    from autokernel.orchestrator import run_elapsed_s

    return run_elapsed_s(store, run_id)


def summarize_run(store, run_id: int, *, status: str = "finished", reason: str = "") -> KBRunSummary:
    run = store.get_run(run_id)
    opts = json.loads(run.config_json or "{}")
    rows = store.list_experiments(run_id=run_id)
    by_kernel: dict[int, list] = {}
    for e in rows:
        by_kernel.setdefault(e.kernel_id, []).append(e)
    problems = []
    for kid, exps in by_kernel.items():
        k = store.get_kernel(kid)
        meta = problem_meta(k)
        base = next((e for e in exps if e.proposer == "baseline" and e.status != "abandoned"), None)
        good = [e for e in exps if e.status in ("kept", "baseline") and e.latency_us is not None]
        best = min(good, key=lambda e: e.latency_us) if good else None
        problems.append({"kernel": k.name, "problem_id": meta.get("problem_id"), "name": meta.get("name"),
                         "start": meta.get("start"), "degenerate": meta.get("degenerate"),
                         "baseline_status": base.status if base else None,
                         "baseline_error": (base.error or "")[:300] if base and base.status != "baseline" else None,
                         "best_us": best.latency_us if best else None,
                         "speedup_vs_eager": best.speedup_vs_eager if best else None,
                         "speedup_vs_compile": best.speedup_vs_compile if best else None,
                         "experiments": sum(1 for e in exps if e.proposer != "baseline"),
                         "kept": sum(1 for e in exps if e.status == "kept")})
    problems.sort(key=lambda d: (d["problem_id"] is None, d["problem_id"]))
    exps = [e for e in rows if e.proposer != "baseline"]
    return KBRunSummary(run_id=run_id, status=status, source=opts.get("source", ""),
                        source_label=source_label(opts.get("source", "")), level=opts.get("level"),
                        agent=run.agent or "", problems=problems, experiments=len(exps),
                        kept=sum(1 for e in exps if e.status == "kept"), elapsed_s=time_spent(store, run_id),
                        stop_reason=reason)



