"""The caller's side of the KernelBench judge: a long-lived child (`autokernel.kb.worker`) run by
the bench's process machinery (BenchWorker: key-stripped environment, own process group, hard
time limit, a crash or hang becomes a result, the child is replaced after a poisoned CUDA
context). The eager and torch.compile baselines stay cached in the child, so they are timed live
in the same process as every candidate, unless the caller supplies them (timed by the trusted
harness in a process of its own: kb/baselines.py). This module never imports torch.

    with KBWorker() as w:
        res = w.evaluate(problem, solution_source, quick=False, timeout_s=600)   # -> BenchResult
"""

from __future__ import annotations

import time

from autokernel.bench.result import CHEAT, COMPILE_ERROR, BenchResult, too_good
from autokernel.bench.runner import GRACE_S, BenchWorker
from autokernel.errors import KernelFileError
from autokernel.kb.problems import Problem

DEFAULT_SEED = 42
# where a result's baselines came from (res.extra["baselines"])
SUPPLIED = "supplied: timed by the trusted harness in a process of its own (kb/baselines.py), not in the judge"
TIMED_NOW = "timed in this judgement"
TIMED_EARLIER = "timed earlier in this judge process"


class KBWorker(BenchWorker):
    """BenchWorker whose child is the KernelBench judge."""

    module = "autokernel.kb.worker"
    label = "the KernelBench judge"
    log_prefix = "ak-kb-"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._timed: dict[str, dict] = {}  # problem code -> the baselines its child timed (see evaluate)

    def evaluate(self, problem: Problem, source: str, *, quick: bool = False, timeout_s: float = 600.0,
                 timing: bool = True, seed: int = DEFAULT_SEED, gpu_compile: bool = False,
                 baselines: dict | None = None) -> BenchResult:
        """Judge one ModelNew source against the problem. Never raises for a bad solution.
        `gpu_compile`: without a GPU, a correct solution's Triton kernels must also compile for sm_90.
        `baselines`: the problem's eager/compile times from BaselineWorker.measure, used instead of
        timing them in the judge (when they are for the judge's device and compile mode)."""
        from autokernel.kernelfile import parse_source

        t0 = time.monotonic()
        try:
            parse_source(source)
        except KernelFileError as exc:
            return BenchResult(kernel_type="kb", backend="triton", outcome=COMPILE_ERROR, error=exc.one_line(),
                               duration_s=time.monotonic() - t0)
        payload = {"op": "kb", "problem_code": problem.code, "problem_name": problem.label(),
                   "level": problem.level, "source": source,
                   "quick": quick, "timeout_s": timeout_s, "timing": timing, "seed": seed,
                   "gpu_compile": gpu_compile, "baselines": baselines}
        res = self.reply_result(self.request(payload, timeout_s + GRACE_S), "kb", "triton")
        res.duration_s = time.monotonic() - t0
        res.extra["isolation"] = self.isolation.detail
        # The speed-ups from numbers this process holds: the child keeps the baselines in the
        # candidate's process, where a candidate can rewrite them (up the stack, or the child's
        # cache that later judgements read). Supplied ones are ours; ones the child timed are
        # taken from the judgement that timed them, before any later candidate could touch them.
        how = res.extra.get("baselines")
        if how == TIMED_NOW and res.eager_us:
            self._timed[problem.code] = {"eager_us": res.eager_us, "compile_us": res.compile_us}
        own = baselines if how == SUPPLIED else self._timed.get(problem.code) if how == TIMED_EARLIER else None
        if how == TIMED_EARLIER and own is None:
            # The child says it timed them earlier, but no judgement of it did: the candidate put
            # them there. Nothing of its timing is trusted, and the next candidate gets a fresh child.
            self._kill()
            res.outcome, res.error = CHEAT, ("the candidate modified the judge itself (baselines the judge "
                                             "had never timed were in its cache)")
            res.speedup_vs_eager = res.speedup_vs_compile = None
        elif own is not None and res.latency_us:
            _own_baselines(res, own)
        return res

    def judge_for(self, problem: Problem, gpu_compile: bool = False, baselines: dict | None = None):
        """A loop judge (the signature loop_experiments.Loop calls) bound to one problem (and to its
        supplied baselines, when given)."""

        def judge(source: str, quick: bool = False, timeout_s: float = 600.0, **_ignored) -> BenchResult:
            return self.evaluate(problem, source, quick=quick, timeout_s=timeout_s, gpu_compile=gpu_compile,
                                 baselines=baselines)

        return judge


def evaluate_once(problem: Problem, source: str, **kw) -> BenchResult:
    """One-shot: a fresh judge process for one solution."""
    with KBWorker() as w:
        return w.evaluate(problem, source, **kw)


def _own_baselines(res: BenchResult, baselines: dict) -> None:
    """The speed-ups from this process's copy of the supplied baselines: the child had them in the
    candidate's process, where its own copy could have been rewritten."""
    eager, comp = baselines.get("eager_us"), baselines.get("compile_us")
    res.eager_us, res.compile_us = eager, comp
    res.speedup_vs_eager = eager / res.latency_us if eager else None
    res.speedup_vs_compile = comp / res.latency_us if comp else None
    res.flagged = bool(res.flagged) or too_good(res.latency_us, eager, comp)
