"""The loop over a pool of judges (`autokernel loop --gpus 0,1,2,3 | --gpus all | --workers N | --ray
ADDRESS`): the same experiments as autokernel/loop.py, judged N at a time. Library code: events only.

This process is the coordinator: it proposes, writes every row of the store, makes every worktree
and commit, and moves the branches; the judges (autokernel/pool.py, pool_ray.py) only judge. The
proposer keeps the pool busy: whenever judges are free it is asked for as many candidates (the
search asks its study that many times, the llm asks for that many answers). A candidate goes, in
this order: its row inserted as running with its judge -> its worktree and pinned commit -> its
judge. Its verdict is written when its judge answers, before git is touched, against the best at
that moment: kept when it beats it (keep_latest: a candidate made from an older head that beats
every keep since still becomes the kernel's version), reverted otherwise. Judges finish out of
numbering order, so the scheduler replays rows by verdict time.

Timings of two GPUs are never compared: each judge times the run's starting kernel itself and puts
its candidates' speed-ups over it in the run's frame (pool_task.py).

A judge whose worker dies under a candidate starts it again; the candidate is recorded as crashed.
Ctrl-C abandons every candidate in flight (no running row, no worktree left); after a kill -9,
`--resume` marks them abandoned and goes on, as for one judge. The judges' rows (the store's
judges table) hold each one's span, busy time and restarts: the run's wall-clock budget and the
report's throughput per GPU and idle time come from them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from autokernel import screening
from autokernel.errors import AutoKernelError, BenchError
from autokernel.loop_experiments import Loop, keepable, verdict_fields
from autokernel.loop_run import LoopEvent, baselines_due
from autokernel.pool_task import JudgeOutcome, JudgeTask
from autokernel.proposers.costs import LLMBudgetSpent
from autokernel.store.tables import utcnow

POLL_S = 2.0  # how long the coordinator waits on its judges before it looks at the clock again
HEARTBEAT_S = 30.0  # how often idle judges' rows are told they are alive (their span, after a kill -9)


@dataclass
class Flight:
    """A judgement in flight: its row, its kernel, where its commit is."""

    exp: Any
    kernel: Any
    slot: Any
    t0: float
    kind: str = "candidate"
    key: Optional[str] = None
    worktree: Optional[Path] = None
    sha: Optional[str] = None


def open_pool(store, emit, *, gpus: Optional[str] = None, workers: Optional[int] = None,
              ray: Optional[str] = None, family: str = "bench"):
    """Start the pool the options name, every judge's device known and, for the bench on GPUs, its
    measured ceilings (once per kind of device, in the store). `family`: "kb" for KernelBench's
    judge. Nothing imports Ray without `ray`."""
    from autokernel.config import Paths
    from autokernel.pool import judge_slots

    cache = Paths(Path(store.path).parent).cache
    env = {"TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", str(cache / "triton")),
           "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))}
    if ray:
        from autokernel.pool_ray import RayPool

        pool = RayPool(ray, workers=workers, gpus=gpus, env=env, family=family)
        emit(LoopEvent("stage", f"starting {pool.size_wanted} judge(s) on the Ray cluster {ray}"))
    else:
        from autokernel.pool import LocalPool

        specs = judge_slots(gpus, workers)
        for s in specs:
            s.env = {**env, **s.env}
        pool = LocalPool(specs, family)
        emit(LoopEvent("stage", f"starting {len(specs)} judge(s): {', '.join(s.label for s in specs)}"))
    pool.start()
    try:
        if family == "bench":
            calibrate_pool(store, pool, emit)
    except BaseException:
        pool.close()
        raise
    return pool


def calibrate_pool(store, pool, emit) -> None:
    """Each GPU judge gets its device's ceilings (measured once per device key, by one of them)."""
    from autokernel.bench import calibrate, ceilings_of

    by_key: dict[str, Any] = {}
    for slot in pool.live():
        if slot.interpreted:
            continue
        if slot.key not in by_key:
            emit(LoopEvent("stage", f"{slot.label}: the device's ceilings ({slot.device})"))
            by_key[slot.key] = ceilings_of(calibrate(store, worker=_Measured(pool, slot)))
        slot.ceilings = by_key[slot.key]
        pool.call(slot, "set_ceilings", slot.ceilings)


class _Measured:
    """A slot seen as bench.calibrate's worker: its device key and a calibrate() that runs there."""

    def __init__(self, pool, slot):
        self.pool, self.slot = pool, slot
        self.info = {"key": slot.key}

    def calibrate(self):
        return self.pool.call(self.slot, "calibrate")


class PooledLoop(Loop):
    """The experiments of one run, judged by a pool (see the module docstring)."""

    def __init__(self, *a, pool, **kw):
        super().__init__(*a, judge=None, screen=None, **kw)
        self.pool = pool
        self.flights: dict[int, Flight] = {}  # slot index -> its judgement in flight
        self.starts: dict[int, str] = {}  # kernel id -> its starting version's source (the judges' reference)
        self.beat = time.monotonic()
        now = utcnow()
        for slot in pool.live():
            slot.judge_id = self.store.add_judge(run_id=self.run.id, slot=slot.index, label=slot.label,
                                                 device=slot.device, host=slot.host, pid=slot.pid, started_at=now,
                                                 last_seen_at=now).id

    # -- what a judge is given ------------------------------------------------------------------

    def task(self, k, source: str, kind: str, quick: bool = False) -> JudgeTask:
        ctx = self.context(k)
        st = self.orch.states.get(k.id)
        t = JudgeTask(kernel_id=k.id, kind=kind, source=source, kernel_type=k.kernel_type, dtype=k.dtype,
                      shapes=ctx.shapes or None, weights=ctx.weights or None, quick=quick,
                      timeout_s=self.orch.judgement_limit(k.id, self.timeout_s),
                      margin=self.margin, gpu_compile=self.proposer.writes_source)
        if kind == "candidate" and st is not None:
            t.start_source = self.start_source(k)
            t.start_shapes, t.library = list(st.start_shapes), st.library
            p = screening.plan(st.start_shapes, st.best_shapes)
            t.plan = {"shape": p.shape, "best_us": p.best_us} if p is not None else None
            t.programs = (screening.best_programs(st.best_shapes, p, st.library, self.orch.target_mode)
                          if p is not None else None)
            if t.programs:
                t.best_source = self.ws.read(k.name)
        return t

    def start_source(self, k) -> str:
        if k.id not in self.starts:
            base = next(e for e in self.store.list_experiments(run_id=self.run.id, kernel_id=k.id)
                        if e.proposer == "baseline" and e.status == "baseline")
            self.starts[k.id] = self.ws.read(k.name, base.commit)
        return self.starts[k.id]

    # -- the starting points --------------------------------------------------------------------

    def baselines(self) -> None:
        """Every kernel's starting point without one yet (or timed on another device), judged in parallel."""
        gpus = {s.device for s in self.pool.live() if not s.interpreted}
        self.timing_device = next(iter(gpus)) if len(gpus) == 1 and not any(
            s.interpreted for s in self.pool.live()) else None  # one kind of card: its name, as results say
        due = baselines_due(self.store.list_experiments(run_id=self.run.id), self.kernels, self.timing_device)
        todo = [k for k in self.kernels.values() if k.id in due]
        try:
            while todo or self.flights:
                while todo and self.pool.free():
                    k = todo.pop(0)
                    if self.elapsed() >= self.budget_s:
                        self.orch.mark_exhausted(k.id)
                        self.emit(LoopEvent("exhausted", f"{k.name}: no time left for its baseline",
                                            {"kernel": k.name}))
                        continue
                    slot = self.pool.free()[0]
                    exp, source = self.baseline_row(k, judge_id=slot.judge_id, moved_from=due[k.id])
                    self.flights[slot.index] = Flight(exp, k, slot, time.monotonic(), kind="baseline")
                    self.pool.submit(slot, self.task(k, source, "baseline"))
                self.collect()
        except BaseException as exc:
            self.abandon_flights(exc)
            raise

    # -- the experiments ------------------------------------------------------------------------

    def run_budget(self) -> str:
        """Candidates while judges are free, until the budget, the limit or the kernels run out; the
        candidates in flight then finish. Returns why it stopped."""
        stop: Optional[str] = None
        try:
            while True:
                stop = stop or self.stop_reason() or self.fill()
                if not self.flights:
                    return stop or self.NOTHING_LEFT
                self.collect()
        except BaseException as exc:
            self.abandon_flights(exc)
            raise

    def stop_reason(self) -> Optional[str]:
        if self.elapsed() >= self.budget_s:
            return self.BUDGET_SPENT
        limit = self.experiment_limit()
        if limit is not None and self.count() >= limit:
            return f"{limit} experiments done"
        return None

    def fill(self) -> Optional[str]:
        """Propose and dispatch while judges are free; a reason when nothing more will be dispatched."""
        while self.pool.free():
            st = self.pick()
            if st is None:
                return self.NOTHING_LEFT
            k = self.kernels[st.kernel_id]
            try:
                proposals = self.propose(k, batch=len(self.pool.free()))
            except LLMBudgetSpent as exc:
                self.llm_budget_spent = True
                return exc.one_line()
            if proposals:
                self.dispatch(k, proposals)
            why = self.stop_reason()
            if why:
                return why
        return None

    def pick(self):
        st = self.orch.pick()
        if st is not None:
            invest = "investing" in self.orch.reason
            if (st.kernel_id, invest) != self.last_reason:
                self.last_reason = (st.kernel_id, invest)
                self.emit(LoopEvent("schedule", self.orch.reason, {"kernel": st.name, "invest": invest}))
        return st

    def dispatch(self, k, proposals) -> int:
        """Each new candidate to a free judge: row, worktree and commit first (kill -9 safe)."""
        seen = screening.judged_keys(self.store.list_experiments(kernel_id=k.id))
        seen |= {f.key for f in self.flights.values() if f.kernel.id == k.id and f.key}
        sent = 0
        for proposal in proposals:
            if not self.pool.free():
                break
            new, key = self.new_candidate(k, proposal, seen)
            if not new:
                continue
            slot = self.pool.free()[0]
            fl = Flight(None, k, slot, time.monotonic(), key=key)
            fl.exp, tag = self.start_experiment(k, proposal, key, judge=slot.label)
            self.flights[slot.index] = fl
            fl.worktree = self.ws.start_experiment(k.name, tag)
            fl.sha = self.ws.commit_experiment(fl.worktree, proposal.source, f"{tag}: {proposal.description}", tag)
            self.store.update_experiment(fl.exp.id, commit=fl.sha, judge_id=slot.judge_id)
            self.pool.submit(slot, self.task(k, proposal.source, "candidate", proposal.quick))
            sent += 1
        n = self.repeats[k.id] = 0 if sent or not proposals else self.repeats.get(k.id, 0) + 1
        if n >= 3:  # only repeats, three times in a row: the proposer cannot leave them
            self.orch.mark_exhausted(k.id)
            self.emit(LoopEvent("exhausted", f"{k.name}: {n} proposals in a row were all judged before; set aside",
                                {"kernel": k.name}))
        return sent

    # -- verdicts -------------------------------------------------------------------------------

    def collect(self) -> None:
        """The judgements that ended within POLL_S, recorded; the judges' rows kept alive."""
        for slot, _task, out in self.pool.wait(POLL_S):
            self.settle(self.flights.pop(slot.index), out)
        if time.monotonic() - self.beat >= HEARTBEAT_S:
            self.beat = time.monotonic()
            now = utcnow()
            for slot in self.pool.live():
                self.store.update_judge(slot.judge_id, last_seen_at=now)

    def settle(self, fl: Flight, out: JudgeOutcome) -> None:
        k, slot = fl.kernel, fl.slot
        if out.judge_error is not None:  # the judge failed, not the candidate: no verdict
            self.abandon_one(fl, BenchError(out.judge_error))
            self.emit(LoopEvent("judge_retired", f"{out.judge_error}; {self.pool.size} judge(s) left",
                                {"judge": slot.label}))
            self.judge_seen(slot, out)
            if not self.pool.size:
                raise BenchError(f"every judge of the pool failed; the last: {out.judge_error}")
            return
        res = out.result
        if out.died:
            res.error = f"{slot.label}: its worker died under this candidate and was started again\n{res.error or ''}"
            self.emit(LoopEvent("judge_restarted", f"{slot.label}: its worker died under #{fl.exp.number}; "
                                "started again", {"judge": slot.label}))
        if fl.kind == "baseline":
            self.judge_seen(slot, out)
            self.baseline_verdict(k, fl.exp, res, out.busy_s, judge_id=slot.judge_id)
            return
        st = self.orch.states[k.id]
        kept = keepable(res, out.extra, st.best_us, st.best_iqr_us)
        fields = verdict_fields(res, out.extra, kept, out.busy_s - out.reference_s)
        row = self.store.update_experiment(fl.exp.id, judge_id=slot.judge_id, **fields)
        if kept:
            self.ws.keep_latest(k.name, fl.worktree, fl.sha)
        else:
            self.ws.revert(k.name, fl.worktree, fl.sha)
        self.recorded(k, row, res)
        self.judge_seen(slot, out)
        self.state_event()

    def judge_seen(self, slot, out: JudgeOutcome) -> None:
        slot.busy_s += out.busy_s
        slot.judged += 1
        self.store.update_judge(slot.judge_id, last_seen_at=utcnow(), pid=slot.pid, restarts=slot.restarts,
                                busy_s=slot.busy_s, judged=slot.judged)

    def abandon_one(self, fl: Flight, exc: BaseException) -> None:
        if fl.worktree is not None:
            try:
                self.ws.revert(fl.kernel.name, fl.worktree, fl.sha)
            except AutoKernelError:
                pass
        if fl.exp is not None:
            self.abandon(fl.exp, exc, fl.t0)

    def abandon_flights(self, exc: BaseException) -> None:
        """Ctrl-C or a failure: no running row and no worktree left behind."""
        for fl in list(self.flights.values()):
            try:
                self.abandon_one(fl, exc)
            except Exception:  # noqa: BLE001 - the others are still abandoned; the resume cleans up
                pass
        self.flights.clear()

    def extra_state(self) -> dict[str, Any]:
        return {"judges": [{"label": s.label, "busy": s.busy, "retired": s.retired, "restarts": s.restarts}
                           for s in self.pool.slots]}
