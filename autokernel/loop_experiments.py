"""The experiments of one loop run (autokernel/loop.py starts the run; loop_pool.py judges on a pool).

One experiment, in the order that makes every interruption recoverable:
1. the orchestrator picks a kernel; the proposer returns a candidate file;
2. the store row is inserted as "running" (its number is allocated there, atomically);
3. a worktree from the kernel's branch head; the candidate committed and pinned under
   refs/autokernel/experiments/<tag>; the commit written into the row;
4. the bench judges it: a candidate judged before (same key) is skipped; the others are screened at the
   heaviest model shape, and one within the best's margin gets the five stages and the full timing (screening.py);
5. the verdict is written into the row *before* git is touched: kept -> fast-forward the branch,
   anything else -> drop the worktree (the commit stays reachable by its ref).
A kill -9 anywhere leaves at most one "running" row: `--resume` marks it abandoned, removes stale
worktrees, and re-applies a kept verdict whose fast-forward had not happened yet. Numbers come from
the store, so nothing is lost or counted twice; time spent comes from the rows' durations. A run
resumed on another device times each kernel's best so far again there first (loop_run.baselines_due).

Keep rule: correct, not flagged (too good to be true is for review), and faster than the kernel's best of this
run by more than the noise: new < best - max((iqr_new + iqr_best) / 2, 1% of best)
(autokernel.orchestrator.noise_us says why). A near miss (at least 0.4% under the best without
beating the noise) is timed back to back with the best at the heaviest model shape, and kept when
that pair finds it faster (paired.py: the pair cancels the drift the 1% allows for).
Abandoned experiments (no verdict) are not tried configurations the first time: proposers/search.py.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

from autokernel import paired, screening
from autokernel.errors import AutoKernelError, LLMError, ProposerError
from autokernel.kernelfile import parse_source
from autokernel.loop_run import Judge, LoopEvent, baselines_due
from autokernel.orchestrator import Orchestrator, beats, run_elapsed_s
from autokernel.proposers import SearchExhausted
from autokernel.proposers.base import KernelContext, Proposal
from autokernel.proposers.costs import LLMBudgetSpent
from autokernel.store.tables import utcnow

__all__ = ["Loop", "keepable", "phases_note", "row_view", "verdict_fields"]

MAX_PROPOSER_FAILURES = 3  # consecutive failed proposals before a kernel is set aside this session


class Loop:
    """The experiments of one run: baselines(), then run_budget() until the budget, the experiment
    limit or the kernels run out (reconcile() first on a resumed run).

    What a subclass may change (kb.runner's loop on one problem, loop_pool.PooledLoop): spec(k), what the
    proposer is told the kernel must compute; experiment_limit() and count(), when the experiments stop;
    extra_state(), what the live view's state events carry; BUDGET_SPENT / NOTHING_LEFT, run_budget's words.
    The steps a subclass that judges otherwise (a pool) builds on, each keeping the store's rows
    and the branches consistent: baseline_row / baseline_verdict (a kernel's starting point),
    propose, new_candidate, start_experiment (a candidate's running row and tag), screened and
    bench (the judge's calls), recorded (a verdict told to the scheduler) and abandon."""

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
        self.device, self.llm_budget_spent = "", False
        self.timing_device: Optional[str] = None  # the name the judge's results carry (baselines_due)
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
                    duplicates=self.duplicates, **self.extra_state())
        rejected = getattr(self.proposer, "rejected", {})
        for row in snap["kernels"]:
            row["rejected"] = rejected.get(row["name"], 0)  # invalid for the device, never compiled
        self.emit(LoopEvent("state", message, snap))

    def extra_state(self) -> dict[str, Any]:
        return {}  # what a subclass adds to the live view's state (a pool: its judges)

    def context(self, k) -> KernelContext:
        from autokernel.extract import kernel_shapes

        shapes, weights = kernel_shapes(k)
        return KernelContext(name=k.name, kernel_type=k.kernel_type, backend=k.backend, dtype=k.dtype,
                             shapes=shapes, weights=weights, kernel_id=k.id, run_id=self.run.id,
                             share=float(k.share or 0.0))

    def key_of(self, k, source: str) -> Optional[str]:
        """The candidate's key, computed with the kernel's shapes as the search is told them."""
        return screening.key_of(source, k.dtype, self.context(k).shapes)

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

    def bench(self, k, source: str, quick: bool, fresh_library: bool = False):
        """The full judgement (limit: Orchestrator.judgement_limit), with a screen its program per shape
        too (later screens compare with it). Once the run's start timed the library (eager, compile per
        shape), candidates are timed alone and get it copied; `fresh_library` times it (another card)."""
        ctx, st = self.context(k), self.orch.states.get(k.id)
        kw = dict(source=source, kernel_type=k.kernel_type, shapes=ctx.shapes or None, weights=ctx.weights or None,
                  dtype=k.dtype, quick=quick, timeout_s=self.orch.judgement_limit(k.id, self.timeout_s),
                  **({"programs": True} if self.screen else {}))
        if st is None or not st.library or fresh_library:
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
        best = screening.best_programs(st.best_shapes, p, st.library, self.orch.target_mode)  # the best's program?
        kw = dict(source=source, kernel_type=k.kernel_type, shapes=[p.shape], weights=[1.0], dtype=k.dtype,
                  timeout_s=min(self.timeout_s, screening.SCREEN_TIMEOUT_S), **({"programs": best} if best else {}))
        return screening.rescreened(self.screen(**kw), p, self.margin, lambda: self.screen(**kw)), p

    # -- resume ---------------------------------------------------------------------------------

    def reconcile(self) -> None:
        """A kept verdict recorded just before a kill may lack its branch move: apply it now. The
        last keep is the last by verdict time (a pool's judges finish out of order)."""
        for k in self.kernels.values():
            kept = [e for e in self.store.list_experiments(run_id=self.run.id, kernel_id=k.id)
                    if e.status == "kept" and e.commit]
            if not kept:
                continue
            last = max(kept, key=lambda e: (e.finished_at or e.created_at, e.number))
            if not self.ws.same_content(self.ws.head(k.name), last.commit):
                try:
                    self.ws.keep_latest(k.name, self.ws.worktrees / f"reconcile-{last.tag}", last.commit)
                except AutoKernelError:
                    pass  # its commit is gone: nothing to re-apply

    # -- the experiments ------------------------------------------------------------------------

    def abandon(self, exp, exc: BaseException, t0: float) -> None:
        """An experiment stopped by Ctrl-C or a bench/workspace failure: no running row left behind."""
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        self.store.update_experiment(exp.id, status="abandoned", error=reason[-2000:],
                                     duration_s=time.monotonic() - t0, finished_at=utcnow())

    def baselines(self) -> None:
        due = baselines_due(self.store.list_experiments(run_id=self.run.id), self.kernels, self.timing_device)
        for k in self.kernels.values():
            if k.id not in due:
                continue
            if self.elapsed() >= self.budget_s:
                # no budget left for a starting point: the kernel is not scheduled in this session
                self.orch.mark_exhausted(k.id)
                self.emit(LoopEvent("exhausted", f"{k.name}: no time left for its baseline", {"kernel": k.name}))
                continue
            exp, source = self.baseline_row(k, moved_from=due[k.id])
            t0 = time.monotonic()
            try:
                res = self.bench(k, source, quick=False, fresh_library=due[k.id] is not None)
            except BaseException as exc:  # Ctrl-C or a bench failure: no running row left behind
                self.abandon(exp, exc, t0)
                raise
            self.baseline_verdict(k, exp, res, time.monotonic() - t0)

    def baseline_row(self, k, judge_id: Optional[int] = None, moved_from: Optional[str] = None) -> tuple[Any, str]:
        """The running row of a kernel's starting point in this run, and its source. `moved_from`: the
        device the run's rows were timed on, when this one is another (the best so far is timed again)."""
        what = (f"best so far, timed again on {self.timing_device} (earlier rows: {moved_from})" if moved_from
                else "starting point of this run")
        self.emit(LoopEvent("baseline", f"{k.name}: {what}" if moved_from else f"baseline of {k.name}",
                            {"kernel": k.name}))
        source = self.ws.read(k.name)
        exp = self.store.add_experiment(run_id=self.run.id, kernel_id=k.id, kernel_type=k.kernel_type,
                                        backend=k.backend, commit=self.ws.head(k.name), proposer="baseline",
                                        description=what, status="running",
                                        config_json=json.dumps(parse_source(source).config, sort_keys=True),
                                        candidate_key=self.key_of(k, source), judge_id=judge_id)
        self.store.update_experiment(exp.id, tag=f"{k.kernel_type}-r{self.run.id}-e{exp.number}")
        return exp, source

    def baseline_verdict(self, k, exp, res, seconds: float, **more) -> Any:
        """Record a starting point's judgement; a kernel whose start is not correct is set aside."""
        fields = res.experiment_fields()
        status = "baseline" if res.correct else fields.get("status", "crashed")
        fields.update(status=status, duration_s=seconds, finished_at=utcnow(), **more)
        row = self.store.update_experiment(exp.id, **fields)
        self.orch.record(row)
        self.last_result[k.id] = res
        if res.correct:
            self.best_result[k.id] = res
        if not res.correct:
            self.orch.mark_exhausted(k.id)
            self.emit(LoopEvent("exhausted", f"{k.name}: its starting kernel is not correct ({res.outcome}); "
                                "skipped", {"kernel": k.name}))
        note = phases_note(res, "judge")
        self.emit(LoopEvent("done", f"{k.name} baseline: {status} in {seconds:.1f} s" + (f" ({note})" if note else ""),
                            {"row": row_view(row)}))
        self.state_event()
        return row

    def spec(self, k):
        """What the proposer is told the kernel must compute: its kernel type's spec."""
        from autokernel.kernels import get_spec

        return get_spec(k.kernel_type)

    def propose(self, k, batch: int = 1) -> list[Proposal]:
        """The proposer's candidates for kernel k (empty when it had none); `batch`: how many the
        loop can judge at once (a pool's free judges). A fatal endpoint error or a spent LLM budget
        propagates."""
        source = self.ws.read(k.name)
        history = self.store.list_experiments(kernel_id=k.id)
        ctx = self.brief(k, source, history)
        ctx.batch = batch
        try:
            got = self.proposer.propose(source, self.spec(k), history, self.last_result.get(k.id), kernel=ctx)
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

    def start_experiment(self, k, proposal: Proposal, key: Optional[str], judge: str = "") -> tuple[Any, str]:
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
        self.emit(LoopEvent("start", f"#{exp.number} {k.name}: {proposal.description}" + (f" [{judge}]" if judge else ""),
                            {"number": exp.number, "kernel": k.name, "description": proposal.description,
                             "judge": judge}))
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
        said: dict[int, str] = {}  # row id -> where its screen's time went, for the log
        sources: dict[int, str] = {}  # row id -> the candidate's source (a near miss is paired with the best)
        try:
            for proposal in proposals:
                new, key = self.new_candidate(k, proposal, seen)
                if not new:
                    continue
                t0 = time.monotonic()
                exp, tag = self.start_experiment(k, proposal, key)
                sources[exp.id] = proposal.source
                open_.append((exp, None, None, t0))
                worktree = self.ws.start_experiment(k.name, tag)
                open_[-1] = (exp, worktree, None, t0)
                sha = self.ws.commit_experiment(worktree, proposal.source, f"{tag}: {proposal.description}", tag)
                open_[-1] = (exp, worktree, sha, t0)
                self.store.update_experiment(exp.id, commit=sha)
                res, plan = self.screened(k, proposal.source)
                extra: dict = {}
                if res is not None:
                    said[exp.id] = phases_note(res)
                    extra = {"screen_us": res.latency_us, "screen_best_us": plan.best_us}
                    stay = screening.left_at_screen(res, plan, self.margin, proposal.source,
                                                    lambda: self.ws.read(k.name))
                    if stay is not None:
                        extra.update(stay)
                    elif res.correct:
                        res = self.bench(k, proposal.source, quick=False)  # within the margin: the full judgement
                        said[exp.id] = "; ".join(filter(None, (said[exp.id], phases_note(res, "judge"))))
                else:
                    res = self.bench(k, proposal.source, quick=proposal.quick)
                    said[exp.id] = phases_note(res, "judge")
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
            eligible = [j for j in judged if keepable(j[3], j[5], best_us, best_iqr)]
            winner = min(eligible, key=lambda j: j[3].latency_us) if eligible else None
            if winner is None:
                winner, judged = self.paired_winner(k, judged, sources, best_us, said)
            rows = []
            for exp, worktree, sha, res, seconds, extra in judged:
                fields = verdict_fields(res, extra, winner is not None and exp.id == winner[0].id, seconds)
                rows.append((self.store.update_experiment(exp.id, **fields), res, said.get(exp.id, "")))
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
        for row, res, note in rows:
            self.recorded(k, row, res, note)
        self.state_event()

    def paired_winner(self, k, judged: list, sources: dict[int, str], best_us: Optional[float],
                      said: dict[int, str]) -> tuple[Any, list]:
        """(the batch's fastest near miss when a back-to-back pair with the best finds it faster, or
        None; `judged` with the pair's seconds added to that candidate's). A near miss: fully judged,
        correct, not flagged, at least paired.PAIR_FROM under the best without beating the noise.
        Its pair (paired.py) is timed at the kernel's heaviest model shape with the judge's checked
        timing; the verdict goes into the row (paired_json) whatever it is."""
        st = self.orch.states.get(k.id)
        p = screening.plan(st.start_shapes, st.best_shapes) if st is not None and self.screen else None
        near = [j for j in judged if j[5].get("status") != "screened" and j[3].correct and not j[3].flagged
                and paired.near_miss(j[3].latency_us, best_us)]
        if p is None or not near:
            return None, judged
        pick = min(near, key=lambda j: j[3].latency_us)
        if not (pick[3].gpu_timing or paired.ON_CPU):
            return None, judged
        kw = dict(kernel_type=k.kernel_type, shapes=[p.shape], weights=[1.0], dtype=k.dtype,
                  timeout_s=min(self.timeout_s, screening.SCREEN_TIMEOUT_S), checked=True)

        def once(source: str):
            res = self.screen(source=source, **kw)
            if res.correct and res.latency_us:
                return res.latency_us, None
            return None, (res.error or res.outcome or "no timing").strip().splitlines()[0][:200]

        verdict = paired.compare(once, self.ws.read(k.name), sources[pick[0].id], rounds=paired.ROUNDS,
                                 min_gain=paired.MIN_GAIN, shape=p.shape, most=paired.MAX_ROUNDS,
                                 budget_s=paired.PAIR_BUDGET_S)
        pick[5]["paired_json"] = json.dumps(verdict.to_dict())
        note = f"{verdict.line()} in {verdict.seconds:.1f} s"
        said[pick[0].id] = "; ".join(filter(None, (said.get(pick[0].id), note)))
        judged = [(e, w, sha, res, sec + (verdict.seconds if e.id == pick[0].id else 0.0), extra)
                  for e, w, sha, res, sec, extra in judged]
        winner = next(j for j in judged if j[0].id == pick[0].id) if verdict.faster else None
        return winner, judged

    def new_candidate(self, k, proposal, seen: set) -> tuple[bool, Optional[str]]:
        """(whether the proposal is new, its key): one judged before (its key in `seen`) is
        skipped and said; a new one's key joins `seen`."""
        key = self.key_of(k, proposal.source)
        if key is not None and key in seen:
            self.duplicates += 1
            self.emit(LoopEvent("duplicate", f"{k.name}: {proposal.description}: judged before, skipped",
                                {"kernel": k.name, "key": key}))
            return False, key
        seen.add(key)
        return True, key

    def recorded(self, k, row, res, note: str = "") -> None:
        """A candidate's verdict, in the store already, told to the scheduler and the live view."""
        self.orch.record(row)
        self.last_result[k.id] = res
        if row.status == "kept":
            self.best_result[k.id] = res
        self.emit(LoopEvent("done", f"#{row.number} {k.name}: {row.status}" + (f" ({note})" if note else ""),
                            {"row": row_view(row)}))

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


def keepable(res, extra: dict, best_us: Optional[float], best_iqr: Optional[float]) -> bool:
    """The keep rule: a full judgement (a screened candidate has none), correct, timed, not flagged,
    faster than the best by more than the noise."""
    return (extra.get("status") != "screened" and res.correct and res.latency_us is not None and not res.flagged
            and beats(res.latency_us, res.latency_iqr_us, best_us, best_iqr))


def phases_note(result, what: str = "screen") -> str:
    """"screen 1.31 s: load 0.40, smoke 0.85, timing 0.06" from a bench result's phases ("" without)."""
    phases = (getattr(result, "extra", None) or {}).get("phases_s") or {}
    if not phases:
        return ""
    return (f"{what} {sum(phases.values()):.2f} s: "
            + ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items()))


def verdict_fields(res, extra: dict, kept: bool, seconds: float) -> dict[str, Any]:
    """The row of a judged candidate: the result's columns, kept or reverted when correct."""
    fields = res.experiment_fields()
    if res.correct:
        fields["status"] = "kept" if kept else "reverted"
        if res.flagged:
            fields["error"] = "too good to be true (bench.result.too_good): flagged for review, not kept"
    fields.update(extra)
    fields.update(duration_s=seconds, finished_at=utcnow())
    return fields


def row_view(e) -> dict[str, Any]:
    """An experiment row as the live view's events carry it."""
    return {k: getattr(e, k) for k in ("number", "tag", "kernel_type", "status", "commit", "description",
                                       "latency_us", "speedup_vs_eager", "pct_peak", "duration_s", "error")}
