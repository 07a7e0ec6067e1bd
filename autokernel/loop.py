"""The experiment runner: `autokernel loop`. Library code: it never prints; progress goes to the
`on_event(LoopEvent)` callback the CLI renders.

One experiment, in the order that makes every interruption recoverable:
1. the orchestrator picks a kernel; the proposer returns a candidate file;
2. the store row is inserted as "running" (its number is allocated there, atomically);
3. a worktree from the kernel's branch head; the candidate committed and pinned under
   refs/autokernel/experiments/<tag>; the commit written into the row;
4. the bench judges it (a quick screen first when the proposer asks; the full judgement only if the
   screen beats the best);
5. the verdict is written into the row *before* git is touched: kept -> fast-forward the branch,
   anything else -> drop the worktree (the commit stays reachable by its ref).
A kill -9 anywhere leaves at most one "running" row: `--resume` marks it abandoned, removes stale
worktrees, and re-applies a kept verdict whose fast-forward had not happened yet. Numbers come from
the store, so nothing is lost or counted twice; time spent comes from the rows' durations.

Keep rule: correct, not flagged (over 10x is for review), and faster than the kernel's best of this
run by more than the noise: new < best - max(iqr_new, iqr_best, 1% of best).

Abandoned experiments are not counted as tried configurations the first time (they never got a
verdict); see proposers/search.py.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from autokernel.errors import AutoKernelError, ConfigError, LLMError, NotFoundError, ProposerError
from autokernel.orchestrator import Orchestrator, beats, run_elapsed_s
from autokernel.proposers import LLMSettings, SearchExhausted, make_proposer
from autokernel.proposers.base import KernelContext, Proposal
from autokernel.proposers.costs import LLMBudgetSpent
from autokernel.runs import check_loop_options, lock_key, lock_what
from autokernel.store.tables import utcnow

MAX_PROPOSER_FAILURES = 3  # consecutive failed proposals before a kernel is set aside this session


@dataclass
class LoopEvent:
    kind: str  # stage | baseline | start | done | proposer_failed | exhausted | state | verify
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    run_id: Optional[int] = None  # set on every event once the run's row exists


@dataclass
class LoopSummary:
    run_id: int
    status: str  # finished | interrupted
    model: str
    agent: str
    experiments: int = 0  # non-baseline experiments in the run (all sessions)
    starting_points: int = 0  # baseline rows: each kernel's start, judged once per run
    kept: int = 0
    elapsed_s: float = 0.0
    predicted_speedup: float = 1.0
    kernels: list[dict[str, Any]] = field(default_factory=list)
    median_experiment_s: Optional[float] = None
    stop_reason: str = ""
    verify: Optional[dict[str, Any]] = None
    verify_error: Optional[str] = None
    timing: str = "gpu"  # gpu | cpu: what the latencies are (CPU: autokernel.cpu_timing)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


Judge = Callable[..., Any]  # (source, kernel_type=, shapes=, weights=, dtype=, quick=, timeout_s=) -> BenchResult


class _Loop:
    """The experiments of one run. Subclasses (kb.runner._KBLoop) change what differs through spec(),
    experiment_limit(), count() and the stop reasons, never the loop itself."""

    # why run_budget stops (subclasses word it for what they run on)
    BUDGET_SPENT = "time budget spent"
    NOTHING_LEFT = "every kernel exhausted"

    def __init__(self, store, workspace, *, run, kernels, agent, proposer, judge, budget_s, max_experiments,
                 timeout_s, on_event):
        self.store, self.ws, self.run = store, workspace, run
        self.kernels = {k.id: k for k in kernels}
        self.agent, self.proposer, self.judge = agent, proposer, judge
        self.budget_s, self.max_experiments, self.timeout_s = budget_s, max_experiments, timeout_s
        self.emit = on_event or (lambda e: None)
        self.orch = Orchestrator.from_store(store, run.id, kernels)
        self.elapsed_before = run_elapsed_s(store, run.id)
        self.t0 = time.monotonic()
        self.last_result: dict[int, Any] = {}
        self.best_result: dict[int, Any] = {}  # the bench result of each kernel's best version, this session
        self.failures: dict[int, int] = {}
        self.ceilings: Optional[dict] = None  # this device's measured ceilings (GPU), for the proposer
        self.device = ""
        self.llm_budget_spent = False
        self._changes: dict[str, Optional[str]] = {}  # commit -> what it changed (git show is not free)

    # -- bookkeeping ----------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.elapsed_before + (time.monotonic() - self.t0)

    def count(self) -> int:
        return sum(1 for e in self.store.list_experiments(run_id=self.run.id) if e.proposer != "baseline")

    def state_event(self, message: str = "") -> None:
        snap = self.orch.snapshot()
        snap.update(run_id=self.run.id, experiments=self.count(), elapsed_s=self.elapsed(),
                    time_left_s=max(0.0, self.budget_s - self.elapsed()), max_experiments=self.max_experiments)
        self.emit(LoopEvent("state", message, snap))

    def context(self, k) -> KernelContext:
        from autokernel.extract import kernel_shapes

        shapes, weights = kernel_shapes(k)
        return KernelContext(name=k.name, kernel_type=k.kernel_type, backend=k.backend, dtype=k.dtype,
                             shapes=shapes, weights=weights, kernel_id=k.id, run_id=self.run.id,
                             share=float(k.share or 0.0))

    def brief(self, k, source: str, history: list) -> KernelContext:
        """What the proposer is told besides the file: the context, the device's ceilings, the best
        version's per-shape timings, what each recent experiment changed, the last failure's diff."""
        from autokernel.proposers.changes import candidate_diff, commit_change

        ctx = self.context(k)
        ctx.ceilings, ctx.device = self.ceilings, self.device
        best = self.best_result.get(k.id)
        ctx.best_per_shape = list((best.extra or {}).get("per_shape") or []) if best is not None else []
        for e in history[-16:]:
            if e.commit and e.proposer != "baseline" and e.status != "running":
                if e.commit not in self._changes:
                    self._changes[e.commit] = commit_change(self.ws, e.commit)
                if self._changes[e.commit]:
                    ctx.changes[e.id] = self._changes[e.commit]
        done = [e for e in history if e.status not in ("running", "abandoned")]
        if done and done[-1].status in ("incorrect", "crashed", "timeout") and done[-1].commit:
            try:
                ctx.failed_diff = candidate_diff(source, self.ws.read(k.name, done[-1].commit))
            except AutoKernelError:
                pass  # its commit is gone (never for pinned experiments): the error alone is reported
        limit = self.experiment_limit()
        if limit is not None:
            ctx.max_candidates = max(1, limit - self.count())
        return ctx

    def bench(self, k, source: str, quick: bool):
        ctx = self.context(k)
        return self.judge(source=source, kernel_type=k.kernel_type, shapes=ctx.shapes or None,
                          weights=ctx.weights or None, dtype=k.dtype, quick=quick, timeout_s=self.timeout_s)

    # -- resume ---------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """A kept verdict recorded just before a kill may lack its fast-forward: apply it now."""
        for k in self.kernels.values():
            kept = [e for e in self.store.list_experiments(run_id=self.run.id, kernel_id=k.id)
                    if e.status == "kept" and e.commit]
            if not kept:
                continue
            sha = kept[-1].commit
            head = self.ws.head(k.name)
            if head != sha:
                try:
                    self.ws.keep(k.name, self.ws.worktrees / f"reconcile-{kept[-1].tag}", sha)
                except AutoKernelError:
                    pass  # the branch moved on past it (a later keep): nothing to re-apply

    # -- the experiments ------------------------------------------------------------------------

    def abandon(self, exp, exc: BaseException, t0: float) -> None:
        """An experiment stopped by Ctrl-C or a bench/workspace failure: no running row left behind."""
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        self.store.update_experiment(exp.id, status="abandoned", error=reason[-2000:],
                                     duration_s=time.monotonic() - t0, finished_at=utcnow())

    def baselines(self) -> None:
        done = {e.kernel_id for e in self.store.list_experiments(run_id=self.run.id)
                if e.proposer == "baseline" and e.status != "abandoned"}
        for k in self.kernels.values():
            if k.id in done:
                continue
            if self.elapsed() >= self.budget_s:
                # no budget left for a starting point: the kernel is not scheduled in this session
                self.orch.mark_exhausted(k.id)
                self.emit(LoopEvent("exhausted", f"{k.name}: no time left for its baseline", {"kernel": k.name}))
                continue
            self.emit(LoopEvent("baseline", f"baseline of {k.name}", {"kernel": k.name}))
            source = self.ws.read(k.name)
            from autokernel.kernelfile import parse_source

            cfg = parse_source(source).config
            exp = self.store.add_experiment(run_id=self.run.id, kernel_id=k.id, kernel_type=k.kernel_type,
                                            backend=k.backend, commit=self.ws.head(k.name), proposer="baseline",
                                            description="starting point of this run", status="running",
                                            config_json=json.dumps(cfg, sort_keys=True))
            self.store.update_experiment(exp.id, tag=f"{k.kernel_type}-r{self.run.id}-e{exp.number}")
            t0 = time.monotonic()
            try:
                res = self.bench(k, source, quick=False)
            except BaseException as exc:  # Ctrl-C or a bench failure: no running row left behind
                self.abandon(exp, exc, t0)
                raise
            fields = res.experiment_fields()
            status = "baseline" if res.correct else fields.get("status", "crashed")
            fields.update(status=status, duration_s=time.monotonic() - t0, finished_at=utcnow())
            row = self.store.update_experiment(exp.id, **fields)
            self.orch.record(row)
            self.last_result[k.id] = res
            if res.correct:
                self.best_result[k.id] = res
            if not res.correct:
                self.orch.mark_exhausted(k.id)
                self.emit(LoopEvent("exhausted", f"{k.name}: its starting kernel is not correct ({res.outcome}); "
                                    "skipped", {"kernel": k.name}))
            self.emit(LoopEvent("done", f"{k.name} baseline: {status}", {"row": _row(row)}))
            self.state_event()

    def spec(self, k):
        """What the proposer is told the kernel must compute: its kernel type's spec."""
        from autokernel.kernels import get_spec

        return get_spec(k.kernel_type)

    def propose(self, k) -> list[Proposal]:
        """The proposer's candidates for kernel k (empty when it had none); a fatal endpoint error
        or a spent LLM budget propagates."""
        source = self.ws.read(k.name)
        history = self.store.list_experiments(kernel_id=k.id)
        try:
            got = self.proposer.propose(source, self.spec(k), history, self.last_result.get(k.id),
                                        kernel=self.brief(k, source, history))
        except SearchExhausted as exc:
            self.orch.mark_exhausted(k.id)
            self.emit(LoopEvent("exhausted", f"{k.name}: {exc.one_line()}", {"kernel": k.name}))
            return []
        except LLMBudgetSpent:
            raise
        except ProposerError as exc:
            if isinstance(exc, LLMError) and exc.fatal:
                raise  # the endpoint refuses the configuration: the run stops
            n = self.failures[k.id] = self.failures.get(k.id, 0) + 1
            self.emit(LoopEvent("proposer_failed", f"{k.name}: {exc.one_line()}", {"kernel": k.name, "failures": n}))
            if n >= MAX_PROPOSER_FAILURES:
                self.orch.mark_exhausted(k.id)
                self.emit(LoopEvent("exhausted", f"{k.name}: {n} failed proposals in a row; set aside",
                                    {"kernel": k.name}))
            return []
        self.failures[k.id] = 0
        proposals = got if isinstance(got, list) else [got]
        limit = self.experiment_limit()
        if limit is not None:
            proposals = proposals[:max(1, limit - self.count())]
        return proposals

    def _start(self, k, proposal: Proposal) -> tuple[Any, str]:
        exp = self.store.add_experiment(run_id=self.run.id, kernel_id=k.id, kernel_type=k.kernel_type,
                                        backend=k.backend, proposer=self.agent, description=proposal.description,
                                        config_json=json.dumps(proposal.config, sort_keys=True, default=str),
                                        status="running", llm_call_id=proposal.llm_call_id)
        tag = f"{k.kernel_type}-r{self.run.id}-e{exp.number}"
        self.store.update_experiment(exp.id, tag=tag)
        if proposal.llm_call_id is not None:
            call = self.store.get_llm_call(proposal.llm_call_id)
            if call.experiment_id is None:  # the first candidate of the call; all name it in llm_call_id
                self.store.update_llm_call(call.id, experiment_id=exp.id)
        self.emit(LoopEvent("start", f"#{exp.number} {k.name}: {proposal.description}",
                            {"number": exp.number, "kernel": k.name, "description": proposal.description}))
        return exp, tag

    def experiments(self, k, proposals: list[Proposal]) -> None:
        """Judge a batch of candidates for one kernel, each in its own worktree from the same branch
        head, against the best before the batch; the fastest that beats it is kept, the rest reverted.
        A batch of one is the classic keep/revert experiment."""
        st = self.orch.states[k.id]
        best_us, best_iqr = st.best_us, st.best_iqr_us
        open_: list[tuple[Any, Any, Optional[str], float]] = []  # (row, worktree, sha, t0) without a verdict
        judged: list[tuple[Any, Any, str, Any, float]] = []  # (row, worktree, sha, result, seconds)
        try:
            for proposal in proposals:
                t0 = time.monotonic()
                exp, tag = self._start(k, proposal)
                open_.append((exp, None, None, t0))
                worktree = self.ws.start_experiment(k.name, tag)
                open_[-1] = (exp, worktree, None, t0)
                sha = self.ws.commit_experiment(worktree, proposal.source, f"{tag}: {proposal.description}", tag)
                open_[-1] = (exp, worktree, sha, t0)
                self.store.update_experiment(exp.id, commit=sha)
                res = self.bench(k, proposal.source, quick=proposal.quick)
                screened = proposal.quick and res.correct and res.latency_us is not None
                if screened and beats(res.latency_us, res.latency_iqr_us, best_us, best_iqr):
                    res = self.bench(k, proposal.source, quick=False)  # promoted: the full judgement decides
                judged.append((exp, worktree, sha, res, time.monotonic() - t0))
            # a quick screen that did not beat the best fails `beats` here too: never kept unjudged
            eligible = [j for j in judged if j[3].correct and j[3].latency_us is not None and not j[3].flagged
                        and beats(j[3].latency_us, j[3].latency_iqr_us, best_us, best_iqr)]
            winner = min(eligible, key=lambda j: j[3].latency_us) if eligible else None
            rows = []
            for exp, worktree, sha, res, seconds in judged:
                fields = res.experiment_fields()
                if res.correct:
                    fields["status"] = "kept" if winner is not None and exp.id == winner[0].id else "reverted"
                    if res.flagged:
                        fields["error"] = "speed-up over 10x: flagged for review, not kept"
                fields.update(duration_s=seconds, finished_at=utcnow())
                rows.append((self.store.update_experiment(exp.id, **fields), res))
                open_ = [o for o in open_ if o[0].id != exp.id]
                if fields["status"] == "kept":
                    self.ws.keep(k.name, worktree, sha)
                else:
                    self.ws.revert(k.name, worktree, sha)
        except BaseException as exc:
            # Ctrl-C (or a workspace/bench failure): leave no running row and no worktree behind.
            for exp, worktree, sha, t0 in open_:
                if worktree is not None:
                    try:
                        self.ws.revert(k.name, worktree, sha)
                    except Exception:
                        pass
                self.abandon(exp, exc, t0)
            raise
        for row, res in rows:
            self.orch.record(row)
            self.last_result[k.id] = res
            if row.status == "kept":
                self.best_result[k.id] = res
            self.emit(LoopEvent("done", f"#{row.number} {k.name}: {row.status}", {"row": _row(row)}))
        self.state_event()

    def experiment_limit(self) -> Optional[int]:
        """How many experiments count() may reach before the loop stops (None: no limit)."""
        return self.max_experiments

    def run_budget(self) -> str:
        """Experiments until the budget, the experiment limit or the kernels run out; returns why it stopped."""
        while True:
            if self.elapsed() >= self.budget_s:
                return self.BUDGET_SPENT
            limit = self.experiment_limit()
            if limit is not None and self.count() >= limit:
                return f"{limit} experiments done"
            st = self.orch.pick()
            if st is None:
                return self.NOTHING_LEFT
            k = self.kernels[st.kernel_id]
            try:
                proposals = self.propose(k)
            except LLMBudgetSpent as exc:
                self.llm_budget_spent = True
                return exc.one_line()
            if proposals:
                self.experiments(k, proposals)


def _row(e) -> dict[str, Any]:
    return {k: getattr(e, k) for k in ("number", "tag", "kernel_type", "status", "commit", "description",
                                       "latency_us", "speedup_vs_eager", "pct_peak", "duration_s", "error")}


def ensure_kernels(store, workspace, *, model: str, backend: str, kernel_types: list[str] | None, batch: int,
                   seq: int | None, dtype: str | None, device: str | None, top: int, emit) -> list:
    """The model's kernels of this backend; profiled and extracted first when the store has none."""
    kernels = [k for k in store.list_kernels(model=model) if k.backend == backend]
    if not kernels:
        from autokernel.extract import extract
        from autokernel.models import load_model
        from autokernel.profile import profile_model

        emit(LoopEvent("stage", f"profiling {model} (nothing in the store for it yet)"))
        bundle = load_model(model, batch=batch, seq=seq, dtype=dtype, device=device)
        result = profile_model(bundle)
        profile = store.add_profile(result.model, result.entries, config=result.config, device=result.device,
                                    total_gpu_ms=result.total_gpu_ms, forward_ms=result.forward_ms)
        del bundle
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():  # the bench child needs the memory the model held here
            torch.cuda.empty_cache()
        emit(LoopEvent("stage", f"extracting the top {top} kernels of profile {profile.id}"))
        extract(store, workspace, profile_id=profile.id, top=top, backend=backend,
                on_skip=lambda name, why: emit(LoopEvent("stage", f"skipped {name}: {why}")))
        kernels = [k for k in store.list_kernels(model=profile.model) if k.backend == backend]
    if kernel_types:
        kernels = [k for k in kernels if k.kernel_type in kernel_types]
    if not kernels:
        raise NotFoundError(f"no {backend} kernels to optimize for {model}"
                            + (f" among {', '.join(kernel_types)}" if kernel_types else ""))
    return kernels


def run_loop(store, workspace, *, model: str | None = None, hours: float | None = None,
             max_experiments: int | None = None,
             agent: str = "search", kernels: list[str] | None = None, backend: str = "triton",
             resume_run_id: int | None = None, batch: int = 1, seq: int | None = None, dtype: str | None = None,
             device: str | None = None, top: int = 5, llm_model: str | None = None, provider: str | None = None,
             llm: LLMSettings | None = None, timeout_s: float = 600.0, verify: bool = True,
             judge: Judge | None = None, proposer=None,
             on_event: Callable[[LoopEvent], None] | None = None) -> LoopSummary:
    """Run (or resume) an optimization run; returns its summary. KeyboardInterrupt is handled: the
    current experiment is abandoned cleanly and the summary says "interrupted". The proposer's
    configuration (the llm's endpoint, key, model, price) is checked before anything is profiled,
    extracted or written; `llm` holds the llm agent's options (llm_model/provider fill its gaps)."""
    emit = on_event or (lambda e: None)
    llm = LLMSettings(**(llm.config() if llm else {}))
    llm.llm_model, llm.provider = llm_model or llm.llm_model, provider or llm.provider
    run = None
    if resume_run_id is not None:
        run = store.get_run(resume_run_id)
        if run.kind != "loop":
            raise ConfigError(f"run {run.id} is a {run.kind} run, not a loop run")
        opts = json.loads(run.config_json or "{}")
        model, agent, backend = run.model, run.agent or agent, opts.get("backend", backend)
        kernels = kernels or opts.get("kernels")
        batch, seq, dtype = opts.get("batch", batch), opts.get("seq", seq), opts.get("dtype", dtype)
        top = opts.get("top", top)
        # the budget of the original command, unless this one names a new one
        hours = hours if hours is not None else opts.get("hours")
        max_experiments = max_experiments if max_experiments is not None else opts.get("max_experiments")
        llm = llm.merged(opts)
    elif not model:
        raise ConfigError("--model is required (or --resume RUN)")
    # every option is checked before anything is written (see autokernel/runs.py)
    check_loop_options(hours=hours, max_experiments=max_experiments, agent=agent if proposer is None else "search",
                       kernels=kernels, backend=backend, batch=batch, seq=seq, dtype=dtype, top=top,
                       timeout_s=timeout_s, provider=llm.provider, llm_model=llm.llm_model)
    if proposer is None:  # a missing model name or key is said now, not after profiling and baselines
        proposer = make_proposer(agent, llm=llm, store=store)
    key = lock_key("loop", model)
    with store.locked(key, what=lock_what("loop", model)):
        if run is not None:
            run = reopen_run(store, run, "loop", emit)
            emit = stamped(emit, run.id)
        cleanup_stale(workspace, emit)
        # a new model is profiled and extracted before its run row exists: a model that does not
        # load leaves no run behind
        rows = ensure_kernels(store, workspace, model=model, backend=backend, kernel_types=kernels, batch=batch,
                              seq=seq, dtype=dtype, device=device, top=top, emit=emit)
        if run is None:
            run = store.create_run("loop", model=model, agent=agent, pid=os.getpid(), config={
                "hours": hours, "max_experiments": max_experiments, "backend": backend, "kernels": kernels,
                "batch": batch, "seq": seq, "dtype": dtype, "top": top, **llm.config()})
            emit = stamped(emit, run.id)
        store.set_lock_run(key, run.id)
        if hasattr(proposer, "run_id"):
            proposer.run_id = run.id
        hours = 8.0 if hours is None else float(hours)
        worker = None
        ceilings: dict = {}
        try:
            if judge is None:
                judge, worker, ceilings = default_judge(store, emit, gpu_compile=proposer.writes_source)
            loop = _Loop(store, workspace, run=run, kernels=rows, agent=agent, proposer=proposer, judge=judge,
                         budget_s=hours * 3600.0, max_experiments=max_experiments, timeout_s=timeout_s,
                         on_event=emit)
            loop.ceilings, loop.device = ceilings.get("ceilings"), ceilings.get("device", "")
        except BaseException:
            if worker is not None:
                worker.close()
            store.finish_run(run.id, "failed")
            raise

        def work() -> str:
            loop.reconcile()
            loop.state_event("starting")
            loop.baselines()
            return loop.run_budget()

        status, reason = run_guarded(store, run.id, work, worker)
        summary = summarize(store, run.id, loop.orch, status=status, reason=reason)
        summary.timing = "gpu" if _has_gpu() else "cpu"
        if verify and status == "finished":
            emit(LoopEvent("stage", "verifying the model with the kept kernels"))
            try:
                summary.verify, summary.verify_error = _verify(store, workspace, run.id, emit)
            except KeyboardInterrupt:
                status = summary.status = "interrupted"
                summary.verify_error = "verification interrupted by the user"
            emit(LoopEvent("verify", summary.verify_error or "verified", {"verify": summary.verify}))
        store.finish_run(run.id, status)
    return summary


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def stamped(emit: Callable[[LoopEvent], None], run_id: int) -> Callable[[LoopEvent], None]:
    """`emit` with the run's id set on every event (the CLI's log file is named after it)."""
    def emit_for_run(event: LoopEvent) -> None:
        if event.run_id is None:
            event.run_id = run_id
        emit(event)
    return emit_for_run


def reopen_run(store, run, kind: str, emit):
    """A run resumed by this process: of the right kind, rows a dead process left "running" marked
    abandoned, and the run itself running again under this pid."""
    if run.kind != kind:
        raise ConfigError(f"run {run.id} is a {run.kind} run, not a {kind} run")
    n = store.abandon_running(run.id)
    if n:
        emit(LoopEvent("stage", f"run {run.id}: {n} experiment(s) left running by a dead process marked abandoned"))
    return store.update_run(run.id, status="running", pid=os.getpid(), finished_at=None)


def run_guarded(store, run_id: int, work: Callable[[], str], worker=None) -> tuple[str, str]:
    """(status, reason) of a run's work (which returns why it stopped): Ctrl-C is an interrupted
    run, any other failure marks the run failed and propagates; the worker is closed either way."""
    try:
        return "finished", work()
    except KeyboardInterrupt:
        return "interrupted", "interrupted by the user"
    except BaseException:
        store.finish_run(run_id, "failed")
        raise
    finally:
        if worker is not None:
            worker.close()


def cleanup_stale(workspace, emit) -> None:
    """Remove the worktrees a dead process left behind."""
    removed = workspace.cleanup_stale()
    if removed:
        emit(LoopEvent("stage", f"removed {len(removed)} stale worktree(s)"))


def default_judge(store, emit, gpu_compile: bool = False) -> tuple[Judge, Any, dict[str, Any]]:
    """The long-lived bench worker (warm caches, isolation per candidate) with the device's measured
    ceilings; on a machine without a GPU, wrapped with CPU wall-clock timing, and with `gpu_compile`
    a correct candidate must also compile for sm_90 (the interpreter runs code the compiler rejects).
    Returns (judge, worker, {"ceilings": measured or None, "device": what the timings are})."""
    import functools
    import platform

    import torch

    from autokernel.bench import calibrate, ceilings_of
    from autokernel.bench.runner import BenchWorker
    from autokernel.cpu_timing import CPU_TIMING_NOTE, CPUTimedJudge

    worker = BenchWorker()
    if not torch.cuda.is_available():
        emit(LoopEvent("stage", "no GPU: kernels run in the Triton interpreter; " + CPU_TIMING_NOTE))
        return (CPUTimedJudge(functools.partial(worker.judge, gpu_compile=gpu_compile)), worker,
                {"ceilings": None, "device": f"cpu {platform.machine()} (Triton interpreter)"})
    emit(LoopEvent("stage", "measuring the device's ceilings (once per device)"))
    device = calibrate(store, worker=worker)
    ceilings = ceilings_of(device)
    return functools.partial(worker.judge, ceilings=ceilings), worker, {"ceilings": ceilings, "device": device.name}


def _verify(store, workspace, run_id: int, emit) -> tuple[Optional[dict], Optional[str]]:
    try:
        from autokernel.verify import verify
    except ImportError as exc:
        return None, f"verify is not available: {exc}"
    try:
        # only what the loop kept goes in: on a CPU every other kernel would be a starter run
        # through the interpreter for nothing (minutes on a non-tiny model)
        result = verify(store, workspace, run_id=run_id, only_kept=True,
                        progress=lambda message: emit(LoopEvent("stage", f"verify: {message}")))
    except AutoKernelError as exc:
        return None, exc.one_line()
    data = result.to_dict() if hasattr(result, "to_dict") else dict(getattr(result, "__dict__", {}))
    return json.loads(json.dumps(data, default=str)), None


def summarize(store, run_id: int, orch: Orchestrator | None = None, *, status: str = "finished",
              reason: str = "") -> LoopSummary:
    """The run's summary from the store alone (also what `--resume` and the report show)."""
    import statistics

    run = store.get_run(run_id)
    rows = store.list_experiments(run_id=run_id)
    if orch is None:
        ids = {e.kernel_id for e in rows}
        orch = Orchestrator.from_store(store, run_id, [store.get_kernel(i) for i in sorted(i for i in ids if i)])
    durations = [e.duration_s for e in rows if e.proposer != "baseline" and e.duration_s]
    exps = [e for e in rows if e.proposer != "baseline"]
    snap = orch.snapshot()
    return LoopSummary(run_id=run_id, status=status, model=run.model or "", agent=run.agent or "",
                       experiments=len(exps), starting_points=len(rows) - len(exps),
                       kept=sum(1 for e in exps if e.status == "kept"),
                       elapsed_s=run_elapsed_s(store, run_id), predicted_speedup=snap["predicted_speedup"],
                       kernels=snap["kernels"], stop_reason=reason,
                       median_experiment_s=statistics.median(durations) if durations else None)
