"""The experiment runner: `autokernel loop`. Library code: it never prints; progress goes to the
`on_event(LoopEvent)` callback the CLI renders.

One experiment, in the order that makes every interruption recoverable:
1. the orchestrator picks a kernel; the proposer returns a candidate file;
2. the store row is inserted as "running" (its number is allocated there, atomically);
3. a worktree from the kernel's branch head; the candidate committed and pinned under
   refs/autokernel/experiments/<tag>; the commit written into the row;
4. the bench judges it: a candidate judged before (same key) is skipped; the others are screened at
   the kernel's heaviest model shape and only one within the margin of the best goes on to the five
   stages and the full timing, the library's timings reused from the run's start (screening.py);
5. the verdict is written into the row *before* git is touched: kept -> fast-forward the branch,
   anything else -> drop the worktree (the commit stays reachable by its ref).
A kill -9 anywhere leaves at most one "running" row: `--resume` marks it abandoned, removes stale
worktrees, and re-applies a kept verdict whose fast-forward had not happened yet. Numbers come from
the store, so nothing is lost or counted twice; time spent comes from the rows' durations.

Keep rule: correct, not flagged (over 10x is for review), and faster than the kernel's best of this
run by more than the noise: new < best - max(iqr_new, iqr_best, 1% of best).

Abandoned experiments are not counted as tried configurations the first time (they never got a
verdict); see proposers/search.py. The run's frame (events, setup, guards, summary) is loop_run.py.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Optional

from autokernel import screening
from autokernel.errors import AutoKernelError, ConfigError, LLMError, ProposerError
from autokernel.loop_run import (Judge, LoopEvent, LoopSummary, cleanup_stale, default_judge, ensure_kernels,
                                 has_gpu, reopen_run, run_guarded, stamped, summarize, verify_run)
from autokernel.objective import MODES
from autokernel.orchestrator import Orchestrator, beats, run_elapsed_s
from autokernel.proposers import LLMSettings, SearchExhausted, make_proposer
from autokernel.proposers.base import KernelContext, Proposal
from autokernel.proposers.costs import LLMBudgetSpent
from autokernel.runs import check_loop_options, lock_key, lock_what
from autokernel.store.tables import utcnow

__all__ = ["LoopEvent", "LoopSummary", "cleanup_stale", "ensure_kernels", "reopen_run", "run_guarded", "run_loop",
           "stamped", "summarize"]

MAX_PROPOSER_FAILURES = 3  # consecutive failed proposals before a kernel is set aside this session


class _Loop:
    """The experiments of one run. Subclasses (kb.runner._KBLoop) change what differs through spec(),
    experiment_limit(), count() and the stop reasons, never the loop itself."""

    # why run_budget stops (subclasses word it for what they run on)
    BUDGET_SPENT = "time budget spent"
    NOTHING_LEFT = "every kernel exhausted"

    def __init__(self, store, workspace, *, run, kernels, agent, proposer, judge, budget_s, max_experiments,
                 timeout_s, on_event, screen: Optional[Judge] = None, margin: float = screening.MARGIN,
                 target_mode: str = "compile"):
        self.store, self.ws, self.run = store, workspace, run
        self.kernels = {k.id: k for k in kernels}
        self.agent, self.proposer, self.judge = agent, proposer, judge
        self.screen, self.margin = screen, margin  # the bench's cheap screen (None: every candidate judged fully)
        self.budget_s, self.max_experiments, self.timeout_s = budget_s, max_experiments, timeout_s
        self.emit = on_event or (lambda e: None)
        self.orch = Orchestrator.from_store(store, run.id, kernels, target_mode=target_mode)
        self.duplicates = 0  # candidates skipped this session: judged before
        self.repeats: dict[int, int] = {}  # kernel -> batches in a row that held only repeats
        self.last_reason: tuple = ()
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
                    time_left_s=max(0.0, self.budget_s - self.elapsed()), max_experiments=self.max_experiments,
                    duplicates=self.duplicates)
        rejected = getattr(self.proposer, "rejected", {})
        for row in snap["kernels"]:
            row["rejected"] = rejected.get(row["name"], 0)  # invalid for the device, never compiled
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
        """The full judgement. Once the run's start of the kernel timed the library (eager and
        torch.compile per shape), later candidates are timed alone and get those timings copied."""
        ctx = self.context(k)
        st = self.orch.states.get(k.id)
        kw = dict(source=source, kernel_type=k.kernel_type, shapes=ctx.shapes or None, weights=ctx.weights or None,
                  dtype=k.dtype, quick=quick, timeout_s=self.timeout_s)
        if st is None or not st.library:
            return self.judge(**kw)
        res = self.judge(**kw, baselines=False)
        screening.fill_library(res, st.start_shapes)
        return res

    def screened(self, k, source: str):
        """(result, plan) of the cheap screen, or (None, None) when the kernel is not screened
        (no screen, or no timing of its best at its heaviest shape yet)."""
        st = self.orch.states.get(k.id)
        p = screening.plan(st.start_shapes, st.best_shapes) if st is not None and self.screen else None
        if p is None:
            return None, None
        res = self.screen(source=source, kernel_type=k.kernel_type, shapes=[p.shape], weights=[1.0], dtype=k.dtype,
                          timeout_s=min(self.timeout_s, screening.SCREEN_TIMEOUT_S))
        return res, p

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
                                            config_json=json.dumps(cfg, sort_keys=True),
                                            candidate_key=screening.key_of(source, k.dtype))
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

    def _start(self, k, proposal: Proposal, key: Optional[str]) -> tuple[Any, str]:
        exp = self.store.add_experiment(run_id=self.run.id, kernel_id=k.id, kernel_type=k.kernel_type,
                                        backend=k.backend, proposer=self.agent, description=proposal.description,
                                        config_json=json.dumps(proposal.config, sort_keys=True, default=str),
                                        status="running", llm_call_id=proposal.llm_call_id, candidate_key=key)
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
        A batch of one is the classic keep/revert experiment. A candidate judged before is skipped;
        one the screen stops is "screened" without the full judgement."""
        st = self.orch.states[k.id]
        best_us, best_iqr = st.best_us, st.best_iqr_us
        seen = screening.judged_keys(self.store.list_experiments(kernel_id=k.id))
        open_: list[tuple[Any, Any, Optional[str], float]] = []  # (row, worktree, sha, t0) without a verdict
        judged: list[tuple[Any, Any, str, Any, float, dict]] = []  # (row, worktree, sha, result, seconds, fields)
        try:
            for proposal in proposals:
                key = screening.key_of(proposal.source, k.dtype)
                if key is not None and key in seen:
                    self.duplicates += 1
                    self.emit(LoopEvent("duplicate", f"{k.name}: {proposal.description}: judged before, skipped",
                                        {"kernel": k.name, "key": key}))
                    continue
                seen.add(key)
                t0 = time.monotonic()
                exp, tag = self._start(k, proposal, key)
                open_.append((exp, None, None, t0))
                worktree = self.ws.start_experiment(k.name, tag)
                open_[-1] = (exp, worktree, None, t0)
                sha = self.ws.commit_experiment(worktree, proposal.source, f"{tag}: {proposal.description}", tag)
                open_[-1] = (exp, worktree, sha, t0)
                self.store.update_experiment(exp.id, commit=sha)
                res, plan = self.screened(k, proposal.source)
                extra: dict = {}
                if res is not None:
                    extra = {"screen_us": res.latency_us, "screen_best_us": plan.best_us}
                    if screening.stopped(res, plan, self.margin):
                        extra.update(screening.screened_fields(res, plan))
                    elif res.correct:
                        res = self.bench(k, proposal.source, quick=False)  # within the margin: the full judgement
                else:
                    res = self.bench(k, proposal.source, quick=proposal.quick)
                judged.append((exp, worktree, sha, res, time.monotonic() - t0, extra))
            if proposals and not judged:  # only repeats: a proposer that cannot leave them is set aside
                n = self.repeats[k.id] = self.repeats.get(k.id, 0) + 1
                if n >= MAX_PROPOSER_FAILURES:
                    self.orch.mark_exhausted(k.id)
                    self.emit(LoopEvent("exhausted", f"{k.name}: {n} proposals in a row were all judged before; "
                                        "set aside", {"kernel": k.name}))
            else:
                self.repeats[k.id] = 0
            # a screened candidate has no full judgement: never kept (its status is set already)
            eligible = [j for j in judged if j[5].get("status") != "screened" and j[3].correct
                        and j[3].latency_us is not None and not j[3].flagged
                        and beats(j[3].latency_us, j[3].latency_iqr_us, best_us, best_iqr)]
            winner = min(eligible, key=lambda j: j[3].latency_us) if eligible else None
            rows = []
            for exp, worktree, sha, res, seconds, extra in judged:
                fields = res.experiment_fields()
                if res.correct:
                    fields["status"] = "kept" if winner is not None and exp.id == winner[0].id else "reverted"
                    if res.flagged:
                        fields["error"] = "speed-up over 10x: flagged for review, not kept"
                fields.update(extra)
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
            invest = "investing" in self.orch.reason
            if (st.kernel_id, invest) != self.last_reason:  # said when the choice (or its ground) changes
                self.last_reason = (st.kernel_id, invest)
                self.emit(LoopEvent("schedule", self.orch.reason, {"kernel": st.name, "invest": invest}))
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


def run_loop(store, workspace, *, model: str | None = None, hours: float | None = None,
             max_experiments: int | None = None,
             agent: str = "search", kernels: list[str] | None = None, backend: str = "triton",
             resume_run_id: int | None = None, batch: int = 1, seq: int | None = None, dtype: str | None = None,
             device: str | None = None, top: int = 5, llm_model: str | None = None, provider: str | None = None,
             llm: LLMSettings | None = None, timeout_s: float = 600.0, verify: bool = True,
             judge: Judge | None = None, proposer=None, screen: Judge | None = None,
             target_mode: str | None = None, margin: float | None = None,
             on_event: Callable[[LoopEvent], None] | None = None) -> LoopSummary:
    """Run (or resume) an optimization run; returns its summary. KeyboardInterrupt is handled: the
    current experiment is abandoned cleanly and the summary says "interrupted". The proposer's
    configuration (the llm's endpoint, key, model, price) is checked before anything is profiled,
    extracted or written; `llm` holds the llm agent's options (llm_model/provider fill its gaps).
    target_mode: what the model runs under, so what a kernel must beat (compile: torch.compile's op,
    GPU time; eager: eager's op, host time included). margin: the screen lets a candidate through
    within this factor of the best (default 1.2). A given `judge` comes with its `screen` (or none)."""
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
        target_mode = target_mode or opts.get("target_mode")
        margin = margin if margin is not None else opts.get("margin")
        llm = llm.merged(opts)
    elif not model:
        raise ConfigError("--model is required (or --resume RUN)")
    target_mode = target_mode or "compile"
    margin = screening.MARGIN if margin is None else float(margin)
    if target_mode not in MODES:
        raise ConfigError(f"--target-mode must be one of {', '.join(MODES)}, not {target_mode!r}")
    if not margin >= 1.0:
        raise ConfigError(f"--screen-margin must be at least 1 (a factor of the best's time), not {margin!r}")
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
                "batch": batch, "seq": seq, "dtype": dtype, "top": top, "target_mode": target_mode, "margin": margin,
                **llm.config()})
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
                screen = ceilings.get("screen")
            loop = _Loop(store, workspace, run=run, kernels=rows, agent=agent, proposer=proposer, judge=judge,
                         budget_s=hours * 3600.0, max_experiments=max_experiments, timeout_s=timeout_s,
                         on_event=emit, screen=screen, margin=margin, target_mode=target_mode)
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
        summary.timing = "gpu" if has_gpu() else "cpu"
        if verify and status == "finished":
            emit(LoopEvent("stage", "verifying the model with the kept kernels"))
            try:
                summary.verify, summary.verify_error = verify_run(store, workspace, run.id, emit)
            except KeyboardInterrupt:
                status = summary.status = "interrupted"
                summary.verify_error = "verification interrupted by the user"
            emit(LoopEvent("verify", summary.verify_error or "verified", {"verify": summary.verify}))
        store.finish_run(run.id, status)
    return summary
