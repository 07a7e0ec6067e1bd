"""Where the next experiment goes: Amdahl scheduling over a model's kernels (DESIGN.md section 5).

With f_i the share of model time in kernel i and s_i its current speed-up, the model's speed-up is
    S = 1 / (1 - sum_i f_i (1 - 1/s_i)).
The next experiment goes to the kernel whose *expected* gain in S is largest. The expectation is
share x headroom x success rate, expressed in Amdahl units: a success is assumed to remove half of
the kernel's remaining distance to its roofline (headroom = 1 - pct_peak/100; unknown roofline
position counts as half-way), and it happens with the kernel's recent success rate (Laplace
smoothed over the last `window` experiments, so a new kernel is tried before it is judged).

A kernel plateaus after `plateau_after` consecutive non-improvements, or when it is within
`roofline_margin_pct` of its roofline; the orchestrator then moves on. When every kernel has
plateaued it revisits the one with the largest expected gain (its counter restarts). A kernel
whose proposer says its space is exhausted is never picked again in this run.

All state is rebuilt from the store's experiment rows, so a resumed run schedules (and accounts
time) exactly as if it had never stopped. The module never imports torch.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Optional

from autokernel.amdahl import kernel_speedup, model_speedup

# statuses that are experiments with a verdict (abandoned rows have none; baseline is the start)
VERDICTS = ("kept", "reverted", "incorrect", "crashed", "timeout")
NOISE_FLOOR = 0.01  # of the best latency: the smallest gain the keep rule believes


def beats(new_us: float, new_iqr: float | None, best_us: float | None, best_iqr: float | None) -> bool:
    """The keep rule: faster than the best by more than the noise,
    new < best - max(iqr_new, iqr_best, 1% of best)."""
    if best_us is None:
        return True
    noise = max(new_iqr or 0.0, best_iqr or 0.0, NOISE_FLOOR * best_us)
    return new_us < best_us - noise


def keep_threshold_us(best_us: float, best_iqr: float | None) -> float:
    """The latency a candidate with no noise of its own must beat to be kept."""
    return best_us - max(best_iqr or 0.0, NOISE_FLOOR * best_us)


@dataclass
class KernelState:
    kernel_id: int
    name: str
    kernel_type: str
    share: float
    baseline_us: Optional[float] = None  # this run's baseline of the kernel
    best_us: Optional[float] = None  # fastest kept-or-baseline latency of this run
    best_iqr_us: Optional[float] = None
    best_pct_peak: Optional[float] = None
    best_vs_eager: Optional[float] = None  # the best candidate's speed-up over eager PyTorch
    best_commit: Optional[str] = None
    attempts: int = 0  # experiments with a verdict, this run
    kept: int = 0
    since_improvement: int = 0
    recent: list[bool] = field(default_factory=list)  # kept or not, oldest first
    time_s: float = 0.0  # wall time spent on this kernel's experiments (from the store)
    exhausted: bool = False
    revisits: int = 0

    @property
    def speedup(self) -> float:
        """Speed-up the kernel brings to the model (autokernel.amdahl.kernel_speedup)."""
        return kernel_speedup(self.best_vs_eager, self.baseline_us, self.best_us)

    @property
    def speedup_vs_baseline(self) -> float:
        if self.baseline_us and self.best_us:
            return self.baseline_us / self.best_us
        return 1.0


class Orchestrator:
    def __init__(self, kernels: Iterable, *, plateau_after: int = 8, roofline_margin_pct: float = 5.0,
                 window: int = 10, success_step: float = 0.5):
        self.plateau_after = plateau_after
        self.roofline_margin_pct = roofline_margin_pct
        self.window = window
        self.success_step = success_step
        self.states: dict[int, KernelState] = {
            k.id: KernelState(kernel_id=k.id, name=k.name, kernel_type=k.kernel_type, share=float(k.share or 0.0))
            for k in kernels}

    # -- building from the store ----------------------------------------------------------------

    @classmethod
    def from_store(cls, store, run_id: int, kernels: Iterable, **kw) -> "Orchestrator":
        orch = cls(kernels, **kw)
        for exp in store.list_experiments(run_id=run_id):
            if exp.kernel_id in orch.states:
                orch.record(exp)
        return orch

    def record(self, exp) -> None:
        """Fold one finished experiment row (baseline or verdict) into the kernel's state."""
        st = self.states.get(exp.kernel_id)
        if st is None or exp.status == "running":
            return
        st.time_s += float(exp.duration_s or 0.0)
        if exp.status == "baseline":
            if exp.latency_us:
                st.baseline_us = exp.latency_us
                self._maybe_best(st, exp, force=st.best_us is None or exp.latency_us < st.best_us)
            return
        if exp.status not in VERDICTS:
            return  # abandoned: no verdict, not an attempt
        st.attempts += 1
        improved = exp.status == "kept"
        if improved:
            st.kept += 1
            st.since_improvement = 0
            self._maybe_best(st, exp, force=True)
        else:
            st.since_improvement += 1
        st.recent = (st.recent + [improved])[-self.window:]

    @staticmethod
    def _maybe_best(st: KernelState, exp, force: bool) -> None:
        if force:
            st.best_us = exp.latency_us
            st.best_iqr_us = exp.latency_iqr_us
            st.best_pct_peak = exp.pct_peak
            st.best_vs_eager = exp.speedup_vs_eager
            st.best_commit = exp.commit

    def mark_exhausted(self, kernel_id: int) -> None:
        self.states[kernel_id].exhausted = True

    # -- scheduling -----------------------------------------------------------------------------

    def predicted_speedup(self) -> float:
        return model_speedup((s.share, s.speedup) for s in self.states.values())

    def success_rate(self, st: KernelState) -> float:
        return (sum(st.recent) + 1.0) / (len(st.recent) + 2.0)

    def headroom(self, st: KernelState) -> float:
        if st.best_pct_peak is None or st.best_pct_peak <= 0:
            return 0.5
        return max(0.0, 1.0 - st.best_pct_peak / 100.0)

    def expected_gain(self, st: KernelState) -> float:
        """Expected increase of the model's speed-up from one more experiment on this kernel."""
        now = self.predicted_speedup()
        cut = self.success_step * self.headroom(st)  # fraction of the kernel's time a success removes
        if cut <= 0:
            return 0.0
        hoped = st.speedup / (1.0 - cut)
        terms = [(o.share, hoped if o.kernel_id == st.kernel_id else o.speedup) for o in self.states.values()]
        return (model_speedup(terms) - now) * self.success_rate(st)

    def plateaued(self, st: KernelState) -> bool:
        if st.since_improvement >= self.plateau_after:
            return True
        return st.best_pct_peak is not None and st.best_pct_peak >= 100.0 - self.roofline_margin_pct

    def pick(self) -> Optional[KernelState]:
        """The kernel for the next experiment, or None when every kernel is exhausted."""
        live = [s for s in self.states.values() if not s.exhausted]
        if not live:
            return None
        fresh = [s for s in live if not self.plateaued(s)]
        if fresh:
            return max(fresh, key=lambda s: (self.expected_gain(s), s.share, -s.kernel_id))
        # All plateaued: revisit the most promising one with a fresh patience counter.
        st = max(live, key=lambda s: (self.expected_gain(s), s.share, -s.kernel_id))
        st.since_improvement = 0
        st.revisits += 1
        return st

    # -- accounting -----------------------------------------------------------------------------

    def total_time_s(self) -> float:
        return sum(s.time_s for s in self.states.values())

    def snapshot(self) -> dict:
        return {
            "predicted_speedup": self.predicted_speedup(),
            "kernels": [
                {"kernel_id": s.kernel_id, "name": s.name, "kernel_type": s.kernel_type, "share": s.share,
                 "baseline_us": s.baseline_us, "best_us": s.best_us, "speedup": s.speedup,
                 "speedup_vs_baseline": s.speedup_vs_baseline, "pct_peak": s.best_pct_peak,
                 "attempts": s.attempts, "kept": s.kept, "time_s": s.time_s, "exhausted": s.exhausted,
                 "plateaued": self.plateaued(s)}
                for s in sorted(self.states.values(), key=lambda s: -s.share)],
        }


def run_elapsed_s(store, run_id: int) -> float:
    """Budget time already spent by a run, from the store: finished experiment rows count their
    measured duration; rows a killed process abandoned count the median duration (their own end
    time is when the resume noticed them, not when they died); and every LLM call counts the time
    spent waiting on it, retries included (calls that gave no experiment too)."""
    rows = store.list_experiments(run_id=run_id)
    done = [float(e.duration_s) for e in rows if e.duration_s]
    median = statistics.median(done) if done else 0.0
    waited = store.llm_usage(run_id)[2]
    return sum(done) + median * sum(1 for e in rows if e.status == "abandoned" and not e.duration_s) + waited


def config_key(config: dict | str | None) -> str:
    """Canonical text of a configuration, used to remember which ones were tried."""
    if isinstance(config, str):
        try:
            config = json.loads(config or "{}")
        except json.JSONDecodeError:
            return config
    return json.dumps(config or {}, sort_keys=True, default=str)
