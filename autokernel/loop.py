"""The experiment runner: `autokernel loop`. Library code: it never prints; progress goes to the
`on_event(LoopEvent)` callback the CLI renders.

run_loop checks the options, profiles and extracts a new model, opens (or reopens) the run and its
judge, then hands the experiments to loop_experiments.Loop (one judge) or loop_pool.PooledLoop (a
pool of judges), and verifies the model with the kept kernels at the end. How one experiment goes,
and why an interruption loses nothing, is loop_experiments.py; the run's frame (events, setup,
guards, summary) is loop_run.py.
"""

from __future__ import annotations

import json
import os
from typing import Callable

from autokernel import screening
from autokernel.errors import ConfigError
from autokernel.loop_experiments import Loop
from autokernel.loop_run import (Judge, LoopEvent, LoopSummary, cleanup_stale, default_judge, ensure_kernels,
                                 has_gpu, reopen_run, run_guarded, stamped, summarize, verify_run)
from autokernel.objective import MODES
from autokernel.proposers import LLMSettings, make_proposer
from autokernel.runs import check_loop_options, lock_key, lock_what

__all__ = ["LoopEvent", "LoopSummary", "cleanup_stale", "ensure_kernels", "reopen_run", "run_guarded", "run_loop",
           "stamped", "summarize"]


def run_loop(store, workspace, *, model: str | None = None, hours: float | None = None,
             max_experiments: int | None = None,
             agent: str = "search", kernels: list[str] | None = None, backend: str = "triton",
             resume_run_id: int | None = None, batch: int = 1, seq: int | None = None, dtype: str | None = None,
             device: str | None = None, top: int = 5, llm_model: str | None = None, provider: str | None = None,
             llm: LLMSettings | None = None, timeout_s: float = 600.0, verify: bool = True,
             judge: Judge | None = None, proposer=None, screen: Judge | None = None,
             target_mode: str | None = None, margin: float | None = None, pool_options=None, pool=None,
             on_event: Callable[[LoopEvent], None] | None = None) -> LoopSummary:
    """Run (or resume) an optimization run; returns its summary. KeyboardInterrupt is handled: the
    current experiment is abandoned cleanly and the summary says "interrupted". The proposer's
    configuration (the llm's endpoint, key, model, price) is checked before anything is profiled,
    extracted or written; `llm` holds the llm agent's options (llm_model/provider fill its gaps).
    target_mode: what the model runs under, so what a kernel must beat (compile: torch.compile's op,
    GPU time; eager: eager's op, host time included). margin: the screen lets a candidate through
    within this factor of the best (default: screening.default_margin, 1.08 on a GPU, 1.2 on the CPU). A given `judge` comes with its `screen` (or none).
    pool_options (pool.PoolOptions: --gpus, --workers, --ray) judge on a pool (loop_pool.py), but
    one GPU (--gpus 0) is the usual loop with its bench worker pinned there; a given, started
    `pool` is used (and closed) instead."""
    from autokernel.pool import PoolOptions

    emit = on_event or (lambda e: None)
    pooled = pool_options or PoolOptions()
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
        pooled = pooled.merged(opts)
    elif not model:
        raise ConfigError("--model is required (or --resume RUN)")
    target_mode = target_mode or "compile"
    margin = screening.default_margin(has_gpu()) if margin is None else float(margin)
    if target_mode not in MODES:
        raise ConfigError(f"--target-mode must be one of {', '.join(MODES)}, not {target_mode!r}")
    if not margin >= 1.0:
        raise ConfigError(f"--screen-margin must be at least 1 (a factor of the best's time), not {margin!r}")
    # every option is checked before anything is written (see autokernel/runs.py)
    check_loop_options(hours=hours, max_experiments=max_experiments, agent=agent if proposer is None else "search",
                       kernels=kernels, backend=backend, batch=batch, seq=seq, dtype=dtype, top=top,
                       timeout_s=timeout_s, provider=llm.provider, llm_model=llm.llm_model)
    pin = None  # one GPU: the run's own bench worker, pinned there (no pool)
    if pool is None and judge is None:
        pooled.check()
        pin = pooled.one_gpu()
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
                **llm.config(), **pooled.config()})
            emit = stamped(emit, run.id)
        store.set_lock_run(key, run.id)
        if hasattr(proposer, "run_id"):
            proposer.run_id = run.id
        hours = 8.0 if hours is None else float(hours)
        worker = None
        ceilings: dict = {}
        common = dict(run=run, kernels=rows, agent=agent, proposer=proposer, budget_s=hours * 3600.0,
                      max_experiments=max_experiments, timeout_s=timeout_s, on_event=emit, margin=margin,
                      target_mode=target_mode)
        try:
            if judge is None and (pool is not None or (pooled.wanted and pin is None)):
                from autokernel.loop_pool import PooledLoop, open_pool

                worker = pool or open_pool(store, emit, **pooled.config())
                loop = PooledLoop(store, workspace, pool=worker, **common)
            else:
                if judge is None:
                    judge, worker, ceilings = default_judge(store, emit, gpu_compile=proposer.writes_source, env=pin)
                    screen = ceilings.get("screen")
                loop = Loop(store, workspace, judge=judge, screen=screen, **common)
                loop.ceilings, loop.device = ceilings.get("ceilings"), ceilings.get("device", "")
                loop.timing_device = ceilings.get("name")
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
        interpreted = loop.pool.interpreted if hasattr(loop, "pool") else not has_gpu()
        summary.timing = "cpu" if interpreted else "gpu"
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
