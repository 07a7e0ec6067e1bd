"""`autokernel kb run --gpus ... | --workers N | --ray ADDRESS`: a level's problems spread over a pool of
judges (autokernel/loop_pool.py), instead of one problem after another.

Every problem is a kernel of one pooled loop: all starting points are judged in parallel, then the
judges are kept busy with candidates of the problem that has had the fewest so far (each gets its
fair share, and at most `experiments_per_problem`). Each candidate is judged by the KernelBench
judge of its judge's GPU, which times the problem's eager model in the same judgement: its
speed-up is measured there, on one GPU, and put in the run's frame through that eager time
(pool_task.py). Rows, worktrees, resume and kill -9 are the pooled loop's.
"""

from __future__ import annotations

from typing import Optional

from autokernel.loop_pool import PooledLoop
from autokernel.loop_run import LoopEvent
from autokernel.pool_task import JudgeTask


class PooledKBLoop(PooledLoop):
    BUDGET_SPENT = "time budget spent"
    NOTHING_LEFT = "every problem done"

    def __init__(self, *a, problems: dict, per_problem: Optional[int], **kw):
        from autokernel.kb.runner import ProblemSpec

        super().__init__(*a, max_experiments=None, **kw)
        self.problems = problems  # kernel id -> Problem
        self.per_problem = per_problem
        self.specs = {kid: ProblemSpec(p) for kid, p in problems.items()}

    def spec(self, k):
        return self.specs[k.id]

    def done_on(self, k) -> int:
        """Experiments of the problem in this run, those in flight included."""
        return sum(1 for e in self.store.list_experiments(run_id=self.run.id, kernel_id=k.id) if e.proposer != "baseline")

    def left(self, k) -> Optional[int]:
        return None if self.per_problem is None else max(0, self.per_problem - self.done_on(k))

    def pick(self):
        """The live problem with the fewest experiments so far; one at its limit is done."""
        live = []
        for st in self.orch.states.values():
            if st.exhausted:
                continue
            k = self.kernels[st.kernel_id]
            if self.left(k) == 0:
                self.orch.mark_exhausted(k.id)
                self.emit(LoopEvent("problem_done", f"{k.name}: {self.per_problem} experiments dispatched",
                                    {"kernel": k.name}))
                continue
            live.append((self.done_on(k), st.kernel_id, st))
        return min(live)[2] if live else None

    def propose(self, k, batch: int = 1):
        left = self.left(k)
        batch = batch if left is None else max(1, min(batch, left))
        got = super().propose(k, batch)
        return got if left is None else got[:left]

    def task(self, k, source: str, kind: str, quick: bool = False) -> JudgeTask:
        t = JudgeTask(kernel_id=k.id, kind=kind, source=source, kernel_type=k.kernel_type, dtype=k.dtype,
                      timeout_s=self.timeout_s, quick=quick, gpu_compile=self.proposer.writes_source,
                      problem=self.problems[k.id])
        if kind == "candidate":
            base = next((e for e in self.store.list_experiments(run_id=self.run.id, kernel_id=k.id)
                         if e.proposer == "baseline" and e.status == "baseline"), None)
            t.start_eager_us = base.eager_us if base is not None else None
        return t


def run_pooled(store, workspace, *, run, problems: list, pool, agent: str, proposer, budget_s: float,
               per_problem: Optional[int], timeout_s: float, emit) -> str:
    """A kb run's problems over the pool; returns why it stopped. A problem whose kernel cannot be
    made is reported and left out; the others go on."""
    from autokernel.errors import AutoKernelError
    from autokernel.kb.runner import _record_degenerate, ensure_problem_kernel

    kernels, by_id = [], {}
    for i, p in enumerate(problems, 1):
        emit(LoopEvent("problem", f"[{i}/{len(problems)}] {p.label()}", {"index": i, "total": len(problems),
                                                                        "kernel": p.kernel_name}))
        try:
            k = ensure_problem_kernel(store, workspace, p, emit)
        except AutoKernelError as exc:
            emit(LoopEvent("problem_failed", f"{p.kernel_name}: {exc.one_line()}", {"kernel": p.kernel_name}))
            continue
        kernels.append(k)
        by_id[k.id] = p
    if not kernels:
        return "no problem could be started"
    loop = PooledKBLoop(store, workspace, run=run, kernels=kernels, agent=agent, proposer=proposer, budget_s=budget_s,
                        timeout_s=timeout_s, on_event=emit, pool=pool, problems=by_id, per_problem=per_problem)
    loop.reconcile()
    loop.baselines()
    for k in kernels:
        if k.id in loop.last_result:
            _record_degenerate(store, store.get_kernel(k.id), loop.last_result[k.id])
    return loop.run_budget()
