"""Amdahl's law: the one place where the loop, verify and report predict a model's speed-up from its
kernels'. A kernel that takes share f_i of the model's time and runs s_i times faster gives

    S = 1 / (1 - sum_i f_i (1 - 1/s_i)).

Which s_i: the speed-up over eager PyTorch where one was measured (a GPU run times eager beside every
candidate); otherwise the speed-up over the kernel's own starting point, which is all the Triton
interpreter can measure. Both the loop's running prediction and verify's use this rule, so they agree
for the same kernels. No torch here: the store and the scheduler use it.
"""

from __future__ import annotations

from typing import Iterable, Optional


def model_speedup(terms: Iterable[tuple[float, float]]) -> float:
    """Amdahl over (share f_i, speed-up s_i). Shares are clipped so that they sum to at most 1."""
    saved, total_share = 0.0, 0.0
    for f, s in terms:
        f = max(0.0, min(1.0, float(f)))
        if total_share + f > 1.0:
            f = 1.0 - total_share
        total_share += f
        if s and s > 0:
            saved += f * (1.0 - 1.0 / s)
    remaining = 1.0 - saved
    return float("inf") if remaining <= 0 else 1.0 / remaining


def kernel_speedup(vs_eager: Optional[float], baseline_us: Optional[float], best_us: Optional[float]) -> float:
    """The speed-up a kernel brings to its model: over eager when measured, else over its starting
    point (baseline latency / best latency), else 1."""
    if vs_eager:
        return float(vs_eager)
    if baseline_us and best_us:
        return float(baseline_us) / float(best_us)
    return 1.0
