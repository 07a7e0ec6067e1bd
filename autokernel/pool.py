"""A pool of judges, one per GPU, fed by the loop's coordinator (autokernel/loop_pool.py).

Each slot is one judge (pool_task.SlotJudge): a bench worker pinned to one GPU with
CUDA_VISIBLE_DEVICES, judging one candidate at a time. Here the judges run in threads of the
coordinating process (their heavy work is in their own worker processes); pool_ray.RayPool runs
them as Ray actors on a cluster with the same interface. The coordinator alone writes the store
and the git workspace: a pool only takes tasks and gives back outcomes.

    pool = LocalPool(judge_slots(gpus="0,1,2,3"))   # or judge_slots(workers=4): CPU judges (tests)
    pool.start()                                    # starts every worker, reads its device
    pool.submit(slot, task); for slot, task, outcome in pool.wait(5.0): ...
    pool.close()

A worker process that dies under a candidate is started again by its judge; the candidate's
result says it crashed. A judge that fails itself (its worker cannot start) is retired: the pool
goes on with the others, and stops only when none is left.
"""

from __future__ import annotations

import os
import socket
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any, Optional

from autokernel.errors import BenchError, ConfigError
from autokernel.pool_task import JudgeOutcome, JudgeTask, SlotJudge

MAX_WORKERS = 64


@dataclass
class SlotSpec:
    label: str  # "gpu 3" | "cpu 1"
    env: dict[str, str] = field(default_factory=dict)  # on top of the coordinator's environment


@dataclass
class Slot:
    index: int
    label: str
    handle: Any = None  # the SlotJudge (local) or its actor (Ray)
    device: str = ""  # the name of what it times on
    key: str = ""  # its device key (the store's devices table)
    interpreted: bool = True  # no GPU: Triton's interpreter and CPU wall-clock timings
    host: str = ""
    pid: Optional[int] = None
    busy: bool = False
    retired: bool = False
    restarts: int = 0
    ceilings: Optional[dict] = None  # its GPU's measured ceilings (the roofline), given by the coordinator
    busy_s: float = 0.0  # this session's judging time, and judgements (the coordinator counts)
    judged: int = 0
    judge_id: Optional[int] = None  # its row in the store's judges table (the coordinator's)


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES values for a child."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    given = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return given[:n] if given else [str(i) for i in range(n)]


def judge_slots(gpus: Optional[str] = None, workers: Optional[int] = None,
                visible: Optional[list[str]] = None) -> list[SlotSpec]:
    """The pool's slots: `gpus` "all" or "0,1,3" (indices among the visible GPUs: one judge each,
    pinned with CUDA_VISIBLE_DEVICES), or `workers` N judges on the CPU (the Triton interpreter;
    for machines without a GPU and for tests)."""
    if gpus is not None and workers is not None:
        raise ConfigError("--gpus and --workers exclude each other: GPU judges, or CPU judges")
    if workers is not None:
        if not 1 <= int(workers) <= MAX_WORKERS:
            raise ConfigError(f"--workers must be between 1 and {MAX_WORKERS}, not {workers}")
        threads = str(max(1, (os.cpu_count() or 1) // int(workers)))
        return [SlotSpec(f"cpu {i}", {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": threads})
                for i in range(int(workers))]
    if gpus is None:
        raise ConfigError("a pool needs --gpus or --workers")
    visible = visible_gpus() if visible is None else visible
    if gpus.strip().lower() == "all":
        if not visible:
            raise ConfigError("--gpus all: no GPU is visible here", hint="use --workers N for N judges on the CPU")
        chosen = list(range(len(visible)))
    else:
        try:
            chosen = [int(x) for x in gpus.replace(" ", "").split(",") if x]
        except ValueError:
            raise ConfigError(f"--gpus takes GPU indices separated by commas (e.g. 0,1,2,3) or all, not {gpus!r}") \
                from None
        bad = [i for i in chosen if not 0 <= i < len(visible)]
        if not chosen or bad or len(set(chosen)) != len(chosen):
            raise ConfigError(f"--gpus {gpus}: {len(visible)} GPU(s) visible here (indices 0-{len(visible) - 1})"
                              if visible else f"--gpus {gpus}: no GPU is visible here",
                              hint="each GPU once; --workers N judges on the CPU")
    return [SlotSpec(f"gpu {i}", {"CUDA_VISIBLE_DEVICES": visible[i]}) for i in chosen]


@dataclass
class PoolOptions:
    """A run's pool (`--gpus`, `--workers`, `--ray`), kept in its row so a resume starts the same one."""

    gpus: Optional[str] = None  # "all" | "0,1,2,3"
    workers: Optional[int] = None  # N judges on the CPU
    ray: Optional[str] = None  # a Ray cluster's address, or "local"

    @property
    def wanted(self) -> bool:
        return bool(self.gpus or self.workers or self.ray)

    def merged(self, stored: dict[str, Any]) -> "PoolOptions":
        """A resume's options; those it does not give are the run's own."""
        if self.wanted:
            return self
        return PoolOptions(stored.get("gpus"), stored.get("workers"), stored.get("ray"))

    def config(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "workers": self.workers, "ray": self.ray}

    def one_gpu(self, visible: Optional[list[str]] = None) -> Optional[dict[str, str]]:
        """A pool of one local GPU (`--gpus 0`, or `--gpus all` where one GPU is visible) is no pool:
        the run's own bench worker, pinned to that GPU, judges exactly as without the option. Its
        environment (CUDA_VISIBLE_DEVICES), or None when the options make a real pool."""
        if self.ray or self.workers is not None or self.gpus is None:
            return None
        specs = judge_slots(self.gpus, visible=visible)
        return dict(specs[0].env) if len(specs) == 1 else None

    def check(self) -> None:
        """Said before anything is written: the slots exist here, or Ray is installed."""
        if self.ray:
            if self.gpus is not None and self.workers is not None:
                raise ConfigError("--gpus and --workers exclude each other: GPU judges, or CPU judges")
            from autokernel.pool_ray import ray_module

            ray_module()
        elif self.wanted:
            judge_slots(self.gpus, self.workers)


class Pool:
    """The slots and the candidates in flight; a backend supplies _make, _call, _submit, _ready, _result."""

    kind = "local"

    def __init__(self, specs: list[SlotSpec], family: str = "bench"):
        self.specs = specs
        self.family = family  # what its judges judge: "bench" | "kb" (pool_task.SlotJudge)
        self.slots = [Slot(index=i, label=s.label) for i, s in enumerate(specs)]
        self._flight: dict[Any, tuple[Slot, JudgeTask]] = {}

    # -- what the coordinator uses --------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.live())

    def live(self) -> list[Slot]:
        return [s for s in self.slots if not s.retired]

    def free(self) -> list[Slot]:
        return [s for s in self.slots if not s.busy and not s.retired]

    def in_flight(self) -> int:
        return len(self._flight)

    @property
    def interpreted(self) -> bool:
        return all(s.interpreted for s in self.live())

    def start(self) -> None:
        """Start every judge's worker and learn its device (in parallel: each imports torch)."""
        errors: list[str] = []

        def one(slot: Slot) -> None:
            try:
                slot.handle = self._make(slot)
                self.describe(slot, self._call(slot, "info"))
            except Exception as exc:  # noqa: BLE001 - said below, with every slot's reason
                errors.append(f"{slot.label}: {getattr(exc, 'one_line', lambda: str(exc))()}")

        threads = [threading.Thread(target=one, args=(s,), daemon=True) for s in self.slots]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.close()
            raise BenchError("the pool's judges did not start: " + "; ".join(sorted(errors)))

    def describe(self, slot: Slot, info: dict) -> None:
        slot.device = str(info.get("name") or info.get("device") or "")
        slot.key = str(info.get("key") or slot.device)
        slot.interpreted = bool(info.get("interpreted", True))
        if slot.interpreted:
            import platform

            slot.device = f"cpu {platform.machine()} (Triton interpreter)"
        slot.host = str(info.get("host") or socket.gethostname())
        slot.pid = self._pid(slot)

    def call(self, slot: Slot, method: str, *args) -> Any:
        """A method of the slot's judge, synchronously (calibrate, set_ceilings, ...)."""
        return self._call(slot, method, *args)

    def submit(self, slot: Slot, task: JudgeTask) -> None:
        if slot.busy or slot.retired:
            raise BenchError(f"{slot.label} is not free")
        slot.busy = True
        self._flight[self._submit(slot, task)] = (slot, task)

    def wait(self, timeout_s: float) -> list[tuple[Slot, JudgeTask, JudgeOutcome]]:
        """The judgements that ended within `timeout_s` (at least one unless the time ran out)."""
        if not self._flight:
            return []
        done = []
        for handle in self._ready(list(self._flight), timeout_s):
            slot, task = self._flight.pop(handle)
            out = self._result(slot, handle)
            slot.busy = False
            if out.judge_error is not None:
                slot.retired = True
            else:
                self._after(slot, out)
            done.append((slot, task, out))
        return done

    def close(self) -> None:
        raise NotImplementedError

    # -- the backend ------------------------------------------------------------------------------

    def _make(self, slot: Slot) -> Any:
        raise NotImplementedError

    def _call(self, slot: Slot, method: str, *args) -> Any:
        raise NotImplementedError

    def _submit(self, slot: Slot, task: JudgeTask) -> Any:
        raise NotImplementedError

    def _ready(self, handles: list, timeout_s: float) -> list:
        raise NotImplementedError

    def _result(self, slot: Slot, handle: Any) -> JudgeOutcome:
        raise NotImplementedError

    def _pid(self, slot: Slot) -> Optional[int]:
        pids = self._call(slot, "worker_pids")
        return pids[0] if pids else None

    def _after(self, slot: Slot, out: JudgeOutcome) -> None:
        slot.restarts = int(self._call(slot, "restarts"))
        slot.pid = self._pid(slot) or slot.pid


class LocalPool(Pool):
    """Judges in threads of this process, each driving its own worker processes."""

    def __init__(self, specs: list[SlotSpec], family: str = "bench"):
        super().__init__(specs, family)
        self._executor = ThreadPoolExecutor(max_workers=max(1, len(specs)), thread_name_prefix="ak-judge")

    def _make(self, slot: Slot) -> SlotJudge:
        return SlotJudge(self.specs[slot.index].env, slot.label, self.family)

    def _call(self, slot: Slot, method: str, *args) -> Any:
        return getattr(slot.handle, method)(*args)

    def _submit(self, slot: Slot, task: JudgeTask) -> Future:
        return self._executor.submit(slot.handle.run, task)

    def _ready(self, handles: list, timeout_s: float) -> list:
        done, _ = wait_futures(handles, timeout=timeout_s, return_when=FIRST_COMPLETED)
        return [h for h in handles if h in done]

    def _result(self, slot: Slot, handle: Future) -> JudgeOutcome:
        return handle.result()

    def close(self) -> None:
        """Stop every worker (in parallel: each may wait a few seconds for its child to exit)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        threads = [threading.Thread(target=s.handle.close, daemon=True) for s in self.slots if s.handle is not None]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=15)
