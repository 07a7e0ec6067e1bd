"""Migration runner: numbered SQL files applied in order, each in its own transaction, recorded.

A database that records a version this code does not know is refused and left untouched.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from autokernel.errors import SchemaTooNewError, StoreError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (datetime('now'))
)"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def bundled_migrations(folder: Path | None = None) -> list[Migration]:
    """The migrations shipped inside the package (or in `folder`), sorted, with no gaps."""
    if folder is None:
        entries = [(p.name, p.read_text()) for p in resources.files("autokernel").joinpath("migrations").iterdir()
                   if p.name.endswith(".sql")]
    else:
        entries = [(p.name, p.read_text()) for p in Path(folder).glob("*.sql")]
    found = []
    for name, sql in entries:
        m = _NAME.match(name)
        if not m:
            raise StoreError(f"migration file {name!r} is not named NNNN_name.sql")
        found.append(Migration(int(m.group(1)), m.group(2), sql))
    found.sort(key=lambda m: m.version)
    for expected, mig in enumerate(found, start=1):
        if mig.version != expected:
            raise StoreError(f"migrations are not numbered 1..N without gaps: found {mig.version} at {expected}")
    return found


def applied_versions(conn: sqlite3.Connection) -> list[int]:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='schema_migrations'").fetchone()
    if row is None:
        return []
    return [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def check_not_newer(conn: sqlite3.Connection, migrations: list[Migration] | None = None) -> None:
    """Refuse a database recorded at a version this code does not know; reads only."""
    migrations = bundled_migrations() if migrations is None else migrations
    known = migrations[-1].version if migrations else 0
    done = applied_versions(conn)
    if done and max(done) > known:
        raise SchemaTooNewError(
            f"the database schema is version {max(done)} but this AutoKernel knows only up to {known}",
            hint="upgrade AutoKernel or use another --home; the database was not changed",
        )


def migrate(conn: sqlite3.Connection, migrations: list[Migration] | None = None) -> list[int]:
    """Bring the database up to the newest migration; returns the versions applied now.

    `conn` must be in autocommit mode (isolation_level=None) so each file gets an explicit
    transaction of its own.
    """
    migrations = bundled_migrations() if migrations is None else migrations
    check_not_newer(conn, migrations)
    known = migrations[-1].version if migrations else 0
    conn.execute("BEGIN IMMEDIATE")  # serialise concurrent openers; the ledger is created once
    try:
        conn.execute(_LEDGER)
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")
        raise
    done = applied_versions(conn)
    if done and max(done) > known:
        raise SchemaTooNewError(
            f"the database schema is version {max(done)} but this AutoKernel knows only up to {known}",
            hint="upgrade AutoKernel or use another --home; the database was not changed",
        )
    applied = []
    for mig in migrations:
        if mig.version in done:
            continue
        try:
            conn.execute("BEGIN IMMEDIATE")
            # another process may have applied it while we waited for the write lock
            if conn.execute("SELECT 1 FROM schema_migrations WHERE version=?", (mig.version,)).fetchone():
                conn.execute("COMMIT")
                continue
            for statement in _statements(mig.sql):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations(version, name) VALUES (?, ?)", (mig.version, mig.name))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"migration {mig.version:04d}_{mig.name} failed: {exc}") from exc
        applied.append(mig.version)
    return applied


def _statements(sql: str) -> list[str]:
    """Split a migration into statements; sqlite3.complete_statement respects quotes and comments."""
    out, buf = [], ""
    for line in sql.splitlines(keepends=True):
        if not buf and line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        raise StoreError("migration ends with an incomplete SQL statement")
    return out
