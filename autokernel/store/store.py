"""The experiment store: one SQLite file in WAL mode that several processes can write to.

Values go in and come out as plain Python objects; the store never imports torch.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import select

from autokernel.errors import LockHeldError, NotFoundError, StoreError
from autokernel.liveness import owner_alive, this_process
from autokernel.store.base import BUSY_TIMEOUT_S, select_where
from autokernel.store.judges import JudgeRows
from autokernel.store.llm_calls import LLMCallRows
from autokernel.store.tables import Device, Dispatch, Experiment, Kernel, Lock, Profile, Run, utcnow

# statuses that end an experiment; "running" rows left by a killed process are abandoned on resume
FINAL_STATUSES = ("kept", "reverted", "incorrect", "crashed", "timeout", "abandoned", "baseline")


class Store(LLMCallRows, JudgeRows):
    """The experiment store: open (and migrate) the database at `path`; use as a context manager or
    call close(). One method group per table; the plumbing is store/base.py."""

    # -- runs -----------------------------------------------------------------------------------

    def create_run(self, kind: str, *, model: str | None = None, agent: str | None = None,
                   config: dict[str, Any] | None = None, device: str | None = None,
                   pid: int | None = None) -> Run:
        return self._add(Run(kind=kind, model=model, agent=agent, config_json=json.dumps(config or {}),
                             device=device, pid=pid))

    def get_run(self, run_id: int) -> Run:
        return self._get(Run, run_id, "run")

    def latest_run(self, kind: str | None = None, model: str | None = None) -> Optional[Run]:
        with self.session() as s:
            q = select(Run)
            if kind:
                q = q.where(Run.kind == kind)
            if model:
                q = q.where(Run.model == model)
            return s.exec(q.order_by(Run.id.desc())).first()

    def list_runs(self) -> list[Run]:
        with self.session() as s:
            return list(s.exec(select(Run).order_by(Run.id)))

    def update_run(self, run_id: int, **fields) -> Run:
        return self._update(Run, run_id, **fields)

    def finish_run(self, run_id: int, status: str = "finished") -> Run:
        return self._update(Run, run_id, status=status, finished_at=utcnow())

    # -- profiles -------------------------------------------------------------------------------

    def add_profile(self, model: str, entries: list[dict], *, config: dict | None = None,
                    device: str | None = None, total_gpu_ms: float = 0.0, forward_ms: float = 0.0,
                    run_id: int | None = None) -> Profile:
        return self._add(Profile(model=model, entries_json=json.dumps(entries), config_json=json.dumps(config or {}),
                                 device=device, total_gpu_ms=total_gpu_ms, forward_ms=forward_ms, run_id=run_id))

    def get_profile(self, profile_id: int) -> Profile:
        return self._get(Profile, profile_id, "profile")

    def latest_profile(self, model: str | None = None) -> Optional[Profile]:
        with self.session() as s:
            q = select(Profile)
            if model:
                q = q.where(Profile.model == model)
            return s.exec(q.order_by(Profile.id.desc())).first()

    # -- kernels --------------------------------------------------------------------------------

    def add_kernel(self, name: str, kernel_type: str, *, backend: str = "triton", model: str | None = None,
                   profile_id: int | None = None, share: float = 0.0, shapes: list[dict] | None = None,
                   dtype: str = "bfloat16", branch: str = "", base_commit: str | None = None) -> Kernel:
        try:
            return self._add(Kernel(name=name, kernel_type=kernel_type, backend=backend, model=model,
                                    profile_id=profile_id, share=share, shapes_json=json.dumps(shapes or []),
                                    dtype=dtype, branch=branch, base_commit=base_commit))
        except StoreError as exc:
            if isinstance(exc.__cause__, IntegrityError):
                raise StoreError(f"a kernel named {name!r} already exists") from exc
            raise

    def get_kernel(self, name_or_id: str | int) -> Kernel:
        with self.session() as s:
            if isinstance(name_or_id, int) or str(name_or_id).isdigit():
                k = s.get(Kernel, int(name_or_id))
            else:
                k = s.exec(select(Kernel).where(Kernel.name == name_or_id)).first()
        if k is None:
            raise NotFoundError(f"kernel {name_or_id!r} not found")
        return k

    def resolve_kernel(self, name: str) -> Kernel:
        """The kernel a user named: its full name, its id, or a short name that fits exactly one
        kernel (the part after the model, e.g. `rmsnorm` for `llama-tiny.rmsnorm`, or its type).
        Several fits or none is a NotFoundError listing the names to choose from."""
        k = self.find_kernel(name)
        if k is not None:
            return k
        if str(name).isdigit():
            return self.get_kernel(int(name))
        kernels = self.list_kernels()
        fits = [k for k in kernels if k.name.endswith("." + name) or k.kernel_type == name]
        if len(fits) == 1:
            return fits[0]
        names = sorted(k.name for k in (fits or kernels))
        listed = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
        if fits:
            raise NotFoundError(f"{name!r} fits {len(fits)} kernels: {listed}", hint="give the full name")
        raise NotFoundError(f"kernel {name!r} not found",
                            hint=f"kernels: {listed}" if names else "the store has no kernels yet")

    def find_kernel(self, name: str) -> Optional[Kernel]:
        with self.session() as s:
            return s.exec(select(Kernel).where(Kernel.name == name)).first()

    def list_kernels(self, model: str | None = None, profile_id: int | None = None) -> list[Kernel]:
        with self.session() as s:
            q = select_where(Kernel, model=model or None, profile_id=profile_id)
            return list(s.exec(q.order_by(Kernel.share.desc(), Kernel.id)))

    def update_kernel(self, kernel_id: int, **fields) -> Kernel:
        return self._update(Kernel, kernel_id, **fields)

    # -- experiments ----------------------------------------------------------------------------

    def add_experiment(self, **fields) -> Experiment:
        """Insert an experiment; when `number` is omitted and a run is given, take the next free one.

        The next number is computed inside the INSERT statement itself (a scalar subquery), and
        SQLite holds the write lock for the whole statement, so two processes appending to one
        run can never read the same maximum. An explicit number that is taken is a StoreError.
        """
        explicit = fields.get("number") not in (None, 0)
        with self.session() as s:
            exp = Experiment(**{**fields, "number": fields.get("number") or 0})
            if not explicit and fields.get("run_id") is not None:
                exp.number = (select(func.coalesce(func.max(Experiment.number), 0) + 1)
                              .where(Experiment.run_id == fields["run_id"]).scalar_subquery())
            s.add(exp)
            try:
                s.commit()
            except IntegrityError as exc:
                s.rollback()
                raise StoreError(f"experiment number {fields.get('number')} already exists in run "
                                 f"{fields.get('run_id')}" if explicit else f"store write refused: {exc.orig}") from exc
            s.refresh(exp)
            return exp

    def update_experiment(self, exp_id: int, **fields) -> Experiment:
        return self._update(Experiment, exp_id, **fields)

    def get_experiment(self, exp_id: int) -> Experiment:
        return self._get(Experiment, exp_id, "experiment")

    def list_experiments(self, run_id: int | None = None, kernel_id: int | None = None,
                         status: str | None = None) -> list[Experiment]:
        with self.session() as s:
            q = select_where(Experiment, run_id=run_id, kernel_id=kernel_id, status=status)
            return list(s.exec(q.order_by(Experiment.run_id, Experiment.number, Experiment.id)))

    def best_experiment(self, kernel_id: int) -> Optional[Experiment]:
        """The fastest correct kept (or baseline) experiment of a kernel."""
        with self.session() as s:
            q = (select(Experiment)
                 .where(Experiment.kernel_id == kernel_id)
                 .where(Experiment.status.in_(("kept", "baseline")))
                 .where(Experiment.latency_us.is_not(None))
                 .order_by(Experiment.latency_us, Experiment.id))
            return s.exec(q).first()

    def abandon_running(self, run_id: int) -> int:
        """Mark experiments a killed process left 'running' as abandoned; returns how many."""
        with self.session() as s:
            rows = list(s.exec(select(Experiment).where(Experiment.run_id == run_id)
                               .where(Experiment.status == "running")))
            for e in rows:
                e.status = "abandoned"
                e.error = (e.error or "") + "process ended before the experiment finished"
                e.finished_at = utcnow()
                s.add(e)
            s.commit()
            return len(rows)

    # -- locks: one writer per run ---------------------------------------------------------------

    def acquire_lock(self, key: str, *, what: str | None = None, run_id: int | None = None) -> Lock:
        """Take `key` for this process, or raise LockHeldError naming the live process holding it.

        A lock whose holder is gone (a kill -9, a crash) is taken over. The check and the write are
        one IMMEDIATE transaction, so of two processes taking one key at once exactly one wins."""
        me = this_process()
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute('SELECT pid, host, start, run_id, acquired_at FROM locks WHERE "key" = ?',
                                   (key,)).fetchone()
                if row is not None:
                    holder = {"pid": row[0], "host": row[1], "start": row[2]}
                    if holder != me and owner_alive(holder):
                        raise LockHeldError(_held_message(what or key, holder, row[3], row[4]),
                                            hint=f"wait for it or stop it (Ctrl-C, or kill {row[0]}); "
                                                 "a lock whose process has died is taken over")
                conn.execute('INSERT OR REPLACE INTO locks ("key", pid, host, start, run_id, acquired_at) '
                             "VALUES (?, ?, ?, ?, ?, ?)", (key, me["pid"], me["host"], me["start"], run_id,
                                                            utcnow().strftime("%Y-%m-%d %H:%M:%S.%f")))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"cannot take the lock {key!r}: {exc}") from exc
        finally:
            conn.close()
        return self.get_lock(key)

    def get_lock(self, key: str) -> Optional[Lock]:
        with self.session() as s:
            return s.get(Lock, key)

    def set_lock_run(self, key: str, run_id: int) -> None:
        """Record which run the lock's holder works on (known only once the run row exists)."""
        self._update(Lock, key, run_id=run_id)

    def release_lock(self, key: str) -> None:
        """Drop `key` if this process holds it (never another's)."""
        me = this_process()
        with self.session() as s:
            lock = s.get(Lock, key)
            if lock is not None and (lock.pid, lock.host) == (me["pid"], me["host"]):
                s.delete(lock)
                s.commit()

    @contextmanager
    def locked(self, key: str, *, what: str | None = None) -> Iterator[Lock]:
        """Hold `key` for the duration of the block (released on any exit, Ctrl-C included)."""
        lock = self.acquire_lock(key, what=what)
        try:
            yield lock
        finally:
            self.release_lock(key)

    # -- devices --------------------------------------------------------------------------------

    def upsert_device(self, key: str, **fields) -> Device:
        with self.session() as s:
            dev = s.exec(select(Device).where(Device.key == key)).first()
            if dev is None:
                dev = Device(key=key)
            for k, v in fields.items():
                setattr(dev, k, v)
            dev.measured_at = utcnow()
            s.add(dev)
            s.commit()
            s.refresh(dev)
            return dev

    def get_device(self, key: str) -> Optional[Device]:
        with self.session() as s:
            return s.exec(select(Device).where(Device.key == key)).first()

    # -- dispatch decisions ---------------------------------------------------------------------

    def record_dispatch(self, rows: list[dict]) -> int:
        """Insert or replace decisions (one per kernel type, source, mode, shape, dtype, evidence);
        the newest measurement of a key wins. Returns how many were written."""
        key = ("kernel_type", "source_hash", "mode", "shape", "dtype", "evidence")
        with self.session() as s:
            for row in rows:
                q = select(Dispatch)
                for k in key:
                    q = q.where(getattr(Dispatch, k) == row.get(k, "model" if k == "evidence" else None))
                old = s.exec(q).first()
                obj = old if old is not None else Dispatch()
                for k, v in row.items():
                    setattr(obj, k, v)
                obj.created_at = utcnow()
                s.add(obj)
            s.commit()
        return len(rows)

    def list_dispatch(self, kernel_type: str | None = None, source_hash: str | None = None,
                      run_id: int | None = None) -> list[Dispatch]:
        with self.session() as s:
            q = select_where(Dispatch, kernel_type=kernel_type, source_hash=source_hash, run_id=run_id)
            return list(s.exec(q.order_by(Dispatch.id)))


def _held_message(what: str, holder: dict, run_id: Optional[int], since: Any) -> str:
    where = f" on host {holder['host']}" if holder.get("host") not in (None, "", this_process()["host"]) else ""
    run = f" (run {run_id})" if run_id is not None else ""
    started = f", since {str(since)[:19]} UTC" if since else ""
    return f"{what} is already running{run} in process {holder['pid']}{where}{started}"


def open_store(path: str | Path) -> Store:
    return Store(path)
