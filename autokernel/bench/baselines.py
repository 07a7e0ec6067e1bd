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

import json
import sys
from typing import Any, Optional

from autokernel.bench.runner import BenchWorker
from autokernel.bench.sandbox import Isolation, importable_env

FIRST_REPLY_S = 60.0  # before the first shape is announced (its spec import); each shape extends it
TRUSTED = "none: the trusted timing process, running only the specs' references (no candidate code)"


class TrustedBaselines(BenchWorker):
    """A trusted child that times the references of kernel specs."""

    module = "autokernel.bench.baseline_worker"
    label = "the trusted timing process"
    log_prefix = "ak-bench-baselines-"

    def __init__(self, *, env: Optional[dict[str, str]] = None, python: str = sys.executable):
        super().__init__(env=env, python=python)

    def launch(self):
        return [self._python, "-m", self.module], importable_env(self._env), Isolation(False, TRUSTED)

    def numbers(self, kernel_type: str, shapes: list[dict] | None, dtype: str | None,
                timeout_s: float = FIRST_REPLY_S) -> dict[str, Any]:
        """The reply of the "baselines" request (see baseline_worker), or {"error": one line}. Never
        raises for a failing reference or child: the judgement goes on without baselines."""
        try:
            reply = self.request({"op": "baselines", "kernel_type": kernel_type, "shapes": shapes, "dtype": dtype},
                                 timeout_s)
        except Exception as exc:  # noqa: BLE001 - the child did not start: no baselines, and why
            return {"error": f"{self.label} did not start: {exc}"[:300]}
        if "bench_error" in reply:
            return {"error": str(reply["bench_error"]).strip().splitlines()[-1][:300]}
        if reply.get("died") or reply.get("timeout"):
            lines = str(reply.get("error") or "").strip().splitlines() or ["no output"]
            how = "timed out" if reply.get("timeout") else "died"
            return {"error": f"{self.label} {how}: {lines[-1][:200]}"}
        return reply


def shape_key(shape: dict) -> str:
    """A shape as the trusted reply names it (a JSON round trip of the canonical shape)."""
    return json.dumps(shape, sort_keys=True)


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
    """Set a judged result's baselines and speed-ups from the trusted numbers this process holds,
    whatever the judge's child (which ran the candidate) put there; only its own latencies are
    kept. A result without GPU timing is left as it is."""
    per = res.extra.get("per_shape") if res.gpu_timing else None
    if not per:
        return
    known, why = by_shape(trusted, device_key, res.dtype)
    lat = eager = comp = 0.0
    have_eager = have_comp = True
    for row in per:
        k = known.get(shape_key(row["shape"]), {})
        row["eager_us"], row["compile_us"] = k.get("eager_us"), k.get("compile_us")
        row["eager_wall_us"] = k.get("eager_wall_us")
        w = row["weight"]
        lat += w * row["latency_us"]
        have_eager, eager = (have_eager, eager + w * k["eager_us"]) if k.get("eager_us") else (False, eager)
        have_comp, comp = (have_comp, comp + w * k["compile_us"]) if k.get("compile_us") else (False, comp)
    res.eager_us = eager if have_eager else None
    res.compile_us = comp if have_comp else None
    res.speedup_vs_eager = eager / lat if have_eager and lat > 0 else None
    res.speedup_vs_compile = comp / lat if have_comp and lat > 0 else None
    if why or not have_eager:
        res.extra.setdefault("baseline_error", why or "the trusted process timed no baselines at some shapes")
