"""The caller's side of the KernelBench judge: a long-lived child (`autokernel.kb.worker`) run by
the bench's process machinery (BenchWorker: key-stripped environment, own process group, hard
time limit, a crash or hang becomes a result, the child is replaced after a poisoned CUDA
context). The eager and torch.compile baselines stay cached in the child, so they are timed live
in the same process as every candidate. This module never imports torch.

    with KBWorker() as w:
        res = w.evaluate(problem, solution_source, quick=False, timeout_s=600)   # -> BenchResult
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from autokernel.bench.result import COMPILE_ERROR, CRASHED, TIMEOUT, BenchResult
from autokernel.bench.runner import GRACE_S, BenchWorker
from autokernel.errors import BenchError, KernelFileError
from autokernel.kb.problems import Problem

DEFAULT_SEED = 42


class KBWorker(BenchWorker):
    """BenchWorker whose child is the KernelBench judge."""

    module = "autokernel.kb.worker"

    def _start(self) -> None:
        self._stderr = tempfile.TemporaryFile(prefix="ak-kb-", suffix=".log")
        self._buf = b""
        root = str(Path(__file__).resolve().parents[2])
        env = dict(self._env)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._proc = subprocess.Popen(
            [self._python, "-m", self.module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env=env, start_new_session=True, cwd=os.getcwd())
        hello = self._read_reply(self._startup_timeout)
        if not hello or not hello.get("ready"):
            err = self._stderr_tail(0)
            self._kill()
            raise BenchError(f"the KernelBench judge did not start: {err or 'no output'}")
        self._info = hello
        self.restarts += 1

    def evaluate(self, problem: Problem, source: str, *, quick: bool = False, timeout_s: float = 600.0,
                 timing: bool = True, seed: int = DEFAULT_SEED) -> BenchResult:
        """Judge one ModelNew source against the problem. Never raises for a bad solution."""
        from autokernel.kernelfile import parse_source

        t0 = time.monotonic()
        try:
            parse_source(source)
        except KernelFileError as exc:
            return BenchResult(kernel_type="kb", backend="triton", outcome=COMPILE_ERROR, error=exc.one_line(),
                               duration_s=time.monotonic() - t0)
        payload = {"op": "kb", "problem_code": problem.code, "problem_name": problem.label(), "source": source,
                   "quick": quick, "timeout_s": timeout_s, "timing": timing, "seed": seed}
        reply = self.request(payload, timeout_s + GRACE_S)
        if "bench_error" in reply:
            raise BenchError(reply["bench_error"])
        if "result" in reply:
            res = BenchResult.from_dict(reply["result"])
        else:
            res = BenchResult(kernel_type="kb", backend="triton", outcome=TIMEOUT if reply.get("timeout") else CRASHED,
                              error=reply.get("error"))
        res.duration_s = time.monotonic() - t0
        return res

    def judge_for(self, problem: Problem):
        """A loop judge (the signature _Loop calls) bound to one problem."""

        def judge(source: str, quick: bool = False, timeout_s: float = 600.0, **_ignored) -> BenchResult:
            return self.evaluate(problem, source, quick=quick, timeout_s=timeout_s)

        return judge


def evaluate_once(problem: Problem, source: str, **kw) -> BenchResult:
    """One-shot: a fresh judge process for one solution."""
    with KBWorker() as w:
        return w.evaluate(problem, source, **kw)
