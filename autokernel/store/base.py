"""The store's plumbing: the SQLite file in WAL mode that several processes can write to, opened
and migrated, its sessions, and the adding and updating of rows that every table's methods use."""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from sqlalchemy import event
from sqlalchemy.exc import DatabaseError, IntegrityError, OperationalError
from sqlmodel import Session, create_engine, select

from autokernel.config import READ_ONLY_ERRNOS
from autokernel.errors import NotFoundError, StoreError
from autokernel.store.migrate import check_not_newer, migrate

BUSY_TIMEOUT_S = 60.0


def _set_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


class StoreBase:
    """Open (and migrate) the database at `path`. Use as a context manager or call close().
    The plumbing every table's rows build on: session(), and _add / _get / _update for the store
    package's row classes (store.py, judges.py, llm_calls.py), which derive from this class."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            raw = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            try:
                # before any pragma: switching a refused database to WAL would already alter it
                check_not_newer(raw)
                _set_pragmas(raw, None)
                migrate(raw)
            finally:
                raw.close()
        except sqlite3.DatabaseError as exc:
            if read_only(self.path) or "readonly" in str(exc):
                raise StoreError(f"the store {self.path} is read-only ({exc})",
                                 hint="AutoKernel writes to its store; make the file and its folder writable, "
                                      "or choose another --home") from exc
            raise StoreError(f"cannot open the store {self.path}: {exc}",
                             hint="the file is damaged or not an AutoKernel database; it was not changed") from exc
        except OSError as exc:
            if exc.errno in READ_ONLY_ERRNOS:
                raise StoreError(f"the store's folder {self.path.parent} is read-only ({exc.strerror})",
                                 hint="choose another --home") from exc
            raise StoreError(f"cannot open the store {self.path}: {exc}") from exc
        self.engine = create_engine(f"sqlite:///{self.path}", connect_args={"timeout": BUSY_TIMEOUT_S})
        event.listen(self.engine, "connect", _set_pragmas)

    # -- plumbing -------------------------------------------------------------------------------

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "StoreBase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except IntegrityError as exc:
                s.rollback()
                raise StoreError(f"store write refused: {exc.orig if hasattr(exc, 'orig') else exc}") from exc
            except (OperationalError, DatabaseError) as exc:
                s.rollback()
                raise StoreError(f"store write failed: {exc.orig if hasattr(exc, 'orig') else exc}") from exc
            except Exception:
                s.rollback()
                raise

    def _add(self, obj):
        with self.session() as s:
            s.add(obj)
            s.commit()
            s.refresh(obj)
            return obj

    def _get(self, cls, id_: Any, what: str):
        """The row of `cls` with primary key `id_`; NotFoundError naming it as `what` if none."""
        with self.session() as s:
            obj = s.get(cls, id_)
        if obj is None:
            raise NotFoundError(f"{what} {id_} not found")
        return obj

    def _update(self, cls, id_: int, **fields):
        with self.session() as s:
            obj = s.get(cls, id_)
            if obj is None:
                raise NotFoundError(f"{cls.__tablename__} {id_} not found")
            for k, v in fields.items():
                if not hasattr(obj, k):
                    raise StoreError(f"{cls.__tablename__} has no column {k!r}")
                setattr(obj, k, v)
            s.add(obj)
            s.commit()
            s.refresh(obj)
            return obj


def select_where(cls, **equal: Any) -> Any:
    """select(cls) keeping the rows whose column equals each given value; a None value filters
    nothing (the list_* methods' optional filters)."""
    q = select(cls)
    for column, value in equal.items():
        if value is not None:
            q = q.where(getattr(cls, column) == value)
    return q


def read_only(db: Path) -> bool:
    """Whether SQLite cannot write the database: the file, or the folder its -wal and -shm files go
    in, is not writable (a read-only mount counts, for root too)."""
    folder = db.parent
    return (db.exists() and not os.access(db, os.W_OK)) or (folder.is_dir() and not os.access(folder, os.W_OK))
