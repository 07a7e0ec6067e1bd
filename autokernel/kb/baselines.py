"""A problem's eager and torch.compile baselines, timed by the trusted harness instead of inside the
judge's candidate process. This module never imports torch.

The judge (kb/worker.py) timed a problem's baselines in the sandboxed child that also runs the
candidate, with the child's own inductor and Triton caches: torch.compile of every reference ran
there, serially, on the CPU while the GPU idled. Here:

1. `compile_all`: the references of many problems are compiled by N processes side by side
   (`BaselineWorker`s, one problem each at a time), all into ONE inductor/Triton cache directory
   under the run's home. Nothing is timed in this phase; it returns only after every compile
   process has exited.
2. `BaselineWorker.measure`: one process, started after that, times eager and compile of one
   problem at a time with the judge's own functions (kb/timing.py baselines_gpu), its
   torch.compile a hit in that cache (inductor's FX graph and AOTAutograd caches, Triton's
   kernels). So only one process uses the GPU while anything is timed: the phases are ordered,
   not locked.

The numbers go to the judge with the request (KBWorker.evaluate(baselines=...)), which uses them
only for the same device key and compile mode. The children here run the checkout's reference
code only, never a candidate's, so they run outside the sandbox (which would keep them off the
shared cache: the run's home is out of a sandboxed child's reach).

    done = compile_all(problems, cache_dir, workers=4, deadline=t)    # name -> reply
    with BaselineWorker(cache_dir) as w:
        reply = w.measure(problem)        # {"baselines": {...}} or {"error": ...}
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from autokernel.bench.runner import TrustedWorker
from autokernel.kb.evaluate import DEFAULT_SEED
from autokernel.kb.problems import Problem

# Hard limits of one request, the child's own alarms (kb/timing.py BASELINE_S = 300 s per stage)
# firing first: a compile is one stage, a measurement two (eager, then compile and its timing).
COMPILE_TIMEOUT_S = 360.0
MEASURE_TIMEOUT_S = 660.0
MAX_COMPILE_WORKERS = 8  # a few GiB of host memory each (torch, inductor's own compile pool)
TRUSTED = "none: the trusted harness, running only the problem's reference Model (no candidate code)"


def default_workers(cpus: Optional[int] = None) -> int:
    """Compile processes for this machine: half its cores (inductor's own compile threads use the
    rest), at least 1, at most MAX_COMPILE_WORKERS."""
    return max(1, min(MAX_COMPILE_WORKERS, (cpus or os.cpu_count() or 2) // 2))


def cache_env(cache_dir: Path, compile_threads: Optional[int] = None) -> dict[str, str]:
    """The variables that point inductor and Triton at the shared cache."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(Path(cache_dir) / "inductor"),
           "TRITON_CACHE_DIR": str(Path(cache_dir) / "triton")}
    if compile_threads:  # not part of inductor's cache key: a hit does not depend on it
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(compile_threads)
    return env


class BaselineWorker(TrustedWorker):
    """A trusted child (kb/baseline_worker.py) on the shared cache in `cache_dir`."""

    module = "autokernel.kb.baseline_worker"
    label = "the trusted baselines process"
    log_prefix = "ak-kb-baselines-"
    trusted = TRUSTED

    def __init__(self, cache_dir: Path, *, compile_threads: Optional[int] = None, python: str = sys.executable):
        for sub in ("inductor", "triton"):
            (Path(cache_dir) / sub).mkdir(parents=True, exist_ok=True)
        super().__init__(env={**os.environ, **cache_env(cache_dir, compile_threads)}, python=python)

    def _ask(self, op: str, problem: Problem, seed: int, timeout_s: float) -> dict:
        return self.ask({"op": op, "problem_code": problem.code, "seed": seed}, timeout_s)

    def compile(self, problem: Problem, seed: int = DEFAULT_SEED, timeout_s: float = COMPILE_TIMEOUT_S) -> dict:
        """torch.compile of the problem's Model into the cache: {"compiled": True, "cache", "s"} or {"error"}."""
        return self._ask("compile", problem, seed, timeout_s)

    def measure(self, problem: Problem, seed: int = DEFAULT_SEED, timeout_s: float = MEASURE_TIMEOUT_S) -> dict:
        """Eager and torch.compile of the problem's Model timed as the judge times them:
        {"baselines": {eager_us, compile_us, compile_error, device, device_key, compile_mode, timing},
        "cache", "s"} or {"error"}."""
        return self._ask("baselines", problem, seed, timeout_s)


def compile_all(problems: list[Problem], cache_dir: Path, workers: int, *, deadline: Optional[float] = None,
                seed: int = DEFAULT_SEED, timeout_s: float = COMPILE_TIMEOUT_S,
                on_done: Optional[Callable[[Problem, dict], None]] = None) -> dict[str, dict]:
    """Every problem's reference compiled into `cache_dir` by `workers` processes side by side, one
    problem per process at a time; none is started after `deadline` (time.monotonic()). Returns
    kernel name -> the compile reply ({"error"} for a problem that failed: the runner goes on and
    the judge's own compile is the fallback); `on_done` is called (one at a time) as each finishes.
    Returns only after every compile process has exited, so a timing after it has the GPU alone."""
    todo: queue.Queue = queue.Queue()
    for p in problems:
        todo.put(p)
    done: dict[str, dict] = {}
    lock = threading.Lock()
    threads = max(1, (os.cpu_count() or 2) // max(1, workers))

    def drain() -> None:
        with BaselineWorker(cache_dir, compile_threads=threads) as w:
            while deadline is None or time.monotonic() < deadline:
                try:
                    p = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    reply = w.compile(p, seed, timeout_s)
                except Exception as exc:  # noqa: BLE001 - the process did not even start: this problem's error
                    reply = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                with lock:
                    done[p.kernel_name] = reply
                    if on_done is not None:
                        on_done(p, reply)

    pool = [threading.Thread(target=drain, name=f"kb-compile-{i}", daemon=True)
            for i in range(max(1, min(workers, len(problems))))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return done
