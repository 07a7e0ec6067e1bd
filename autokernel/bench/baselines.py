"""The caller's side of the bench's trusted timing (bench/baseline_worker.py). This module never
imports torch.

`BenchWorker.judge` asks a `TrustedBaselines` child for the eager and torch.compile baselines (and
the device's ceilings) of the shapes it is about to time, and sends them to the judge's child with
the request. The judge's child never times a reference itself: a candidate there could reach its
caches. The trusted child runs only the specs' references, never candidate code, so it runs
outside the sandbox; it keeps its own caches for as long as it lives, so a second judgement of the
same shapes costs one round trip.

    with TrustedBaselines() as t:
        numbers = t.numbers("rmsnorm", shapes=None, dtype=None)   # {"baselines": [...], ...} or {"error"}
"""

from __future__ import annotations

from typing import Any

from autokernel.bench.runner import TrustedWorker
from autokernel.objective import shape_key, weighted_totals

FIRST_REPLY_S = 60.0  # before the first shape is announced (its spec import); each shape extends it
TRUSTED = "none: the trusted timing process, running only the specs' references (no candidate code)"


class TrustedBaselines(TrustedWorker):
    """A trusted child that times the references of kernel specs."""

    module = "autokernel.bench.baseline_worker"
    label = "the trusted timing process"
    log_prefix = "ak-bench-baselines-"
    trusted = TRUSTED

    def numbers(self, kernel_type: str, shapes: list[dict] | None, dtype: str | None,
                timeout_s: float = FIRST_REPLY_S) -> dict[str, Any]:
        """The reply of the "baselines" request (see baseline_worker), or {"error": one line}. Never
        raises for a failing reference or child: the judgement goes on without baselines."""
        try:
            return self.ask({"op": "baselines", "kernel_type": kernel_type, "shapes": shapes, "dtype": dtype},
                            timeout_s)
        except Exception as exc:  # noqa: BLE001 - the child did not start: no baselines, and why
            return {"error": f"{self.label} did not start: {exc}"[:300]}


def by_shape(trusted: dict | None, device_key: str, dtype: str) -> tuple[dict[str, dict], str | None]:
    """The trusted reply's numbers by shape key, or ({}, why there are none): none were sent, the
    process failed, or they were timed on another device or in another dtype."""
    if not trusted:
        return {}, "no baselines from the trusted timing process"
    if trusted.get("error"):
        return {}, str(trusted["error"])
    if trusted.get("device_key") != device_key or trusted.get("dtype") != dtype:
        return {}, (f"the trusted baselines are for {trusted.get('device_key')} {trusted.get('dtype')}, "
                    f"not {device_key} {dtype}")
    return {shape_key(b["shape"]): b for b in trusted.get("baselines") or []}, None


def settle(res, trusted: dict | None, device_key: str) -> None:
    """Put a judged result's baselines and speed-ups (per shape and weighted) from the trusted numbers
    this process holds: the judge's child, which ran the candidate, reports only its own latencies.
    A result without GPU timing is left as it is."""
    per = res.extra.get("per_shape") if res.gpu_timing else None
    if not per:
        return
    known, why = by_shape(trusted, device_key, res.dtype)
    if not why and trusted.get("compile_mode"):
        res.extra["compile_mode"] = trusted["compile_mode"]
    for row in per:
        k = known.get(shape_key(row["shape"]), {})
        row["eager_us"], row["compile_us"] = k.get("eager_us"), k.get("compile_us")
        row["eager_wall_us"] = k.get("eager_wall_us")
        if not why and not k.get("eager_us"):
            why = k.get("error") or f"{shape_key(row['shape'])}: the trusted process timed no baselines here"
    lat, res.eager_us, res.compile_us = weighted_totals(per)
    res.speedup_vs_eager = res.eager_us / lat if res.eager_us is not None and lat > 0 else None
    res.speedup_vs_compile = res.compile_us / lat if res.compile_us is not None and lat > 0 else None
    if why:
        res.extra["baseline_error"] = why
