"""Judges on a Ray cluster (`--ray ADDRESS`, or `--ray local` for a cluster on this machine): each
judge is a Ray actor holding one GPU (num_gpus=1; Ray sets its CUDA_VISIBLE_DEVICES) and running
pool_task.SlotJudge there, bench worker processes included. Candidates go to the actors and results
come back as Ray objects; the store and the git workspace stay with the coordinator, which is the
only one to write them. This is the only module that imports Ray, and only when a pool is made.

Judges: one per GPU of the cluster, or `--workers N` actors each holding one GPU resource: on a
machine without GPUs, `--ray local --workers N` starts a local cluster that declares N (fake) GPUs,
so the actors are placed as on a real cluster and judge on the CPU (the tests do this).

An actor that dies (its process killed, its node lost) fails the candidate it held (crashed) and
is replaced by a new one; a replacement that cannot start retires the judge.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Optional

from autokernel.bench.result import CRASHED, BenchResult
from autokernel.errors import ConfigError
from autokernel.pool import MAX_WORKERS, Pool, Slot, SlotSpec
from autokernel.pool_task import JudgeOutcome, JudgeTask, SlotJudge

OBJECT_STORE_BYTES = 200 * 1024 * 1024  # a local cluster's object store: candidates and results are small


def ray_module():
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("--ray needs Ray, which is not installed here",
                          hint="pip install 'autokernel[ray]' (on the coordinator and on every node)") from exc
    return ray


class RayPool(Pool):
    kind = "ray"

    def __init__(self, address: str, *, workers: Optional[int] = None, gpus: Optional[str] = None,
                 env: Optional[dict[str, str]] = None, family: str = "bench"):
        ray = self._ray = ray_module()
        if gpus is not None and gpus.strip().lower() != "all":
            raise ConfigError(f"--gpus {gpus} with --ray: a cluster's judges are one per GPU (--gpus all) "
                              "or --workers N")
        if workers is not None and not 1 <= int(workers) <= MAX_WORKERS:
            raise ConfigError(f"--workers must be between 1 and {MAX_WORKERS}, not {workers}")
        self._owns = not ray.is_initialized()
        local = address.strip().lower() == "local"
        if self._owns:
            kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False)
            if local:
                kw["object_store_memory"] = OBJECT_STORE_BYTES
                if workers:  # declared GPUs: with none here the actors judge on the CPU
                    kw.update(num_gpus=int(workers), num_cpus=max(os.cpu_count() or 1, int(workers)))
                ray.init(**kw)
            else:
                # the package travels to the cluster's workers with the job (they need torch and triton)
                ray.init(address=address, runtime_env={"py_modules": [str(Path(__file__).resolve().parent)]}, **kw)
        have = int(ray.cluster_resources().get("GPU", 0))
        n = int(workers) if workers else have
        if n == 0 or n > have:
            self.close()
            raise ConfigError(f"the Ray cluster {address} has {have} GPU(s); {n or 'no'} judge(s) cannot be placed",
                              hint="--workers N for N judges (a local cluster declares N GPUs)")
        # the coordinator's cache folders mean something on this machine only
        self._env = dict(env or {}) if local else {}
        self._actor_cls = ray.remote(SlotJudge).options(num_gpus=1, num_cpus=0, max_restarts=0)
        self._sent: dict[Any, float] = {}
        self._replaced: dict[int, int] = {}  # slot -> actors started again after one died
        super().__init__([SlotSpec(f"ray {i}", {}) for i in range(n)], family)

    @property
    def size_wanted(self) -> int:
        return len(self.slots)

    def _make(self, slot: Slot) -> Any:
        return self._actor_cls.remote(self._env, slot.label, self.family)

    def _call(self, slot: Slot, method: str, *args) -> Any:
        return self._ray.get(getattr(slot.handle, method).remote(*args))

    def _pid(self, slot: Slot) -> Optional[int]:
        return self._call(slot, "pid")  # the actor's process: what dies with it

    def _submit(self, slot: Slot, task: JudgeTask) -> Any:
        ref = slot.handle.run.remote(task)
        self._sent[ref] = time.monotonic()
        return ref

    def _ready(self, handles: list, timeout_s: float) -> list:
        ready, rest = self._ray.wait(handles, num_returns=1, timeout=timeout_s)
        if ready and rest:
            more, _ = self._ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def _result(self, slot: Slot, ref: Any) -> JudgeOutcome:
        t0 = self._sent.pop(ref, time.monotonic())
        try:
            return self._ray.get(ref)
        except self._ray.exceptions.RayActorError as exc:
            return self._replace(slot, exc, time.monotonic() - t0)

    def _replace(self, slot: Slot, exc: BaseException, seconds: float) -> JudgeOutcome:
        """The actor died under a candidate: the candidate crashed; a new actor takes the slot."""
        out = JudgeOutcome(result=BenchResult(kernel_type="", backend="", outcome=CRASHED,
                                              error=f"{slot.label}: its Ray actor died: {str(exc)[-1500:]}"),
                           busy_s=seconds, died=True)
        try:
            self._ray.kill(slot.handle, no_restart=True)
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        try:
            slot.handle = self._make(slot)
            self.describe(slot, self._call(slot, "info"))
            if slot.ceilings is not None:
                self._call(slot, "set_ceilings", slot.ceilings)
        except Exception as again:  # noqa: BLE001 - the slot is retired with why
            out.judge_error = f"{slot.label}: its Ray actor died and a new one did not start: {again}"
        self._replaced[slot.index] = self._replaced.get(slot.index, 0) + 1
        return out

    def _after(self, slot: Slot, out: JudgeOutcome) -> None:
        slot.restarts = self._replaced.get(slot.index, 0) + int(self._call(slot, "restarts"))
        slot.pid = self._pid(slot) or slot.pid

    def close(self) -> None:
        ray = self._ray
        for slot in getattr(self, "slots", []):
            if slot.handle is None:
                continue
            try:
                if not slot.busy:
                    ray.get(slot.handle.close.remote(), timeout=15)
            except Exception:  # noqa: BLE001 - killed below either way
                pass
            try:
                ray.kill(slot.handle, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if self._owns and ray.is_initialized():
            ray.shutdown()
