"""The SQLite store on real files: migrations, schema == SQLModel metadata, refusals, concurrency."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlmodel import SQLModel

from akfixtures import pythonpath

from autokernel.errors import NotFoundError, SchemaTooNewError, StoreError
from autokernel.store import Store
from autokernel.store import tables  # noqa: F401  (registers the tables on SQLModel.metadata)
from autokernel.store.migrate import applied_versions, bundled_migrations, migrate

INITIAL_TABLES = {"runs", "profiles", "kernels", "experiments", "devices", "llm_calls"}  # 0001 creates these
TABLES = INITIAL_TABLES | {"dispatch", "locks", "judges"}



def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_migrations_from_empty(tmp_path):
    db = tmp_path / "sub" / "ak.db"
    with Store(db) as store:
        assert db.exists()
        store.create_run("loop", model="gpt2")
    conn = sqlite3.connect(db)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert TABLES | {"schema_migrations"} <= names
    assert applied_versions(conn) == [m.version for m in bundled_migrations()]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    # reopening applies nothing again and keeps the data
    raw = sqlite3.connect(db, isolation_level=None)
    assert migrate(raw) == []
    raw.close()
    with Store(db) as store:
        assert [r.model for r in store.list_runs()] == ["gpt2"]


def _metadata_schema():
    dialect = sqlite_dialect.dialect()
    schema = {}
    for name, table in SQLModel.metadata.tables.items():
        if name not in TABLES:
            continue
        cols = {c.name: (c.type.compile(dialect=dialect), bool(c.nullable), bool(c.primary_key))
                for c in table.columns}
        indexes = {(i.name, tuple(c.name for c in i.columns), bool(i.unique)) for i in table.indexes}
        uniques = {tuple(c.name for c in u.columns) for u in table.constraints
                   if u.__class__.__name__ == "UniqueConstraint"}
        fks = {(fk.parent.name, fk.column.table.name, fk.column.name) for fk in table.foreign_keys}
        schema[name] = (cols, indexes, uniques, fks)
    return schema


def _database_schema(db: Path):
    insp = inspect(create_engine(f"sqlite:///{db}"))
    schema = {}
    for name in insp.get_table_names():
        if name not in TABLES:
            continue
        pk = set(insp.get_pk_constraint(name)["constrained_columns"])
        cols = {c["name"]: (str(c["type"]), bool(c["nullable"]), c["name"] in pk) for c in insp.get_columns(name)}
        indexes = {(i["name"], tuple(i["column_names"]), bool(i["unique"])) for i in insp.get_indexes(name)}
        uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints(name)}
        fks = {(fk["constrained_columns"][0], fk["referred_table"], fk["referred_columns"][0])
               for fk in insp.get_foreign_keys(name)}
        schema[name] = (cols, indexes, uniques, fks)
    return schema


def test_migrated_schema_equals_sqlmodel_metadata(tmp_path):
    db = tmp_path / "ak.db"
    Store(db).close()
    want, got = _metadata_schema(), _database_schema(db)
    assert set(got) == set(want) == TABLES
    for name in TABLES:
        for part, w, g in zip(("columns", "indexes", "unique constraints", "foreign keys"), want[name], got[name]):
            assert g == w, f"{name}: migrated {part} differ from the SQLModel metadata"
    # the comparison is not vacuous: the experiments' unique (run, number) pair is in both
    assert ("run_id", "number") in got["experiments"][2]


def test_newer_schema_is_refused_and_left_unchanged(tmp_path):
    db = tmp_path / "ak.db"
    Store(db).close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("INSERT INTO schema_migrations(version, name) VALUES (99, 'from_the_future')")
    conn.execute("PRAGMA journal_mode=DELETE")  # as another tool might leave it
    conn.close()
    before = _snapshot(tmp_path)
    assert set(before) == {"ak.db"}
    with pytest.raises(SchemaTooNewError) as info:
        Store(db)
    assert "99" in info.value.one_line() and "\n" not in info.value.one_line()
    assert info.value.exit_code == SchemaTooNewError.exit_code != StoreError.exit_code
    assert _snapshot(tmp_path) == before


def test_corrupt_file_gives_one_line_store_error_and_is_untouched(tmp_path):
    db = tmp_path / "ak.db"
    db.write_bytes(os.urandom(8192))
    before = _snapshot(tmp_path)
    with pytest.raises(StoreError) as info:
        Store(db)
    assert not isinstance(info.value, SchemaTooNewError)
    line = info.value.one_line()
    assert "\n" not in line and str(db) in line
    assert _snapshot(tmp_path) == before


def test_failing_migration_rolls_back_completely(tmp_path):
    folder = tmp_path / "migrations"
    folder.mkdir()
    first = bundled_migrations()[0]
    (folder / f"{first.version:04d}_{first.name}.sql").write_text(first.sql)
    (folder / "0002_broken.sql").write_text(
        "CREATE TABLE extra (x INTEGER);\n"
        "ALTER TABLE runs ADD COLUMN flavour VARCHAR;\n"
        "INSERT INTO no_such_table VALUES (1);\n")
    db = tmp_path / "ak.db"
    conn = sqlite3.connect(db, isolation_level=None)
    with pytest.raises(StoreError, match="0002_broken"):
        migrate(conn, bundled_migrations(folder))
    assert not conn.in_transaction
    assert applied_versions(conn) == [1]
    tables_now = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "extra" not in tables_now and INITIAL_TABLES <= tables_now
    assert "flavour" not in {r[1] for r in conn.execute("PRAGMA table_info(runs)")}
    conn.close()
    # the good migration stays applied and the store still works
    with Store(db) as store:
        assert store.create_run("loop").id == 1


def test_badly_named_or_gapped_migrations_are_rejected(tmp_path):
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x INTEGER);")
    (tmp_path / "0003_c.sql").write_text("CREATE TABLE c (x INTEGER);")
    with pytest.raises(StoreError, match="gaps"):
        bundled_migrations(tmp_path)
    (tmp_path / "0003_c.sql").unlink()
    (tmp_path / "2_b.sql").write_text("")
    with pytest.raises(StoreError, match="NNNN_name"):
        bundled_migrations(tmp_path)


def _writer(db: str, run_id: int, count: int, start, who: str) -> None:
    store = Store(db)
    start.wait(30)
    for i in range(count):
        store.add_experiment(run_id=run_id, kernel_type="softmax", tag=f"{who}-{i}", description=f"{who} {i}",
                             status="reverted", latency_us=float(i))
    store.close()


def test_concurrent_writers_lose_nothing_and_never_duplicate_a_number(tmp_path):
    db = tmp_path / "ak.db"
    with Store(db) as store:
        run = store.create_run("loop", model="gpt2")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    n = 200
    procs = [ctx.Process(target=_writer, args=(str(db), run.id, n, start, who)) for who in ("a", "b")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0, 0]
    with Store(db) as store:
        rows = store.list_experiments(run_id=run.id)
    assert len(rows) == 2 * n
    assert sorted(r.number for r in rows) == list(range(1, 2 * n + 1))
    assert {r.tag for r in rows} == {f"{w}-{i}" for w in "ab" for i in range(n)}
    # each writer's own rows are numbered in the order it wrote them
    for w in "ab":
        mine = sorted((r for r in rows if r.tag.startswith(w)), key=lambda r: r.number)
        assert [r.tag for r in mine] == [f"{w}-{i}" for i in range(n)]


def test_crud_round_trip_and_typed_errors(tmp_path):
    with Store(tmp_path / "ak.db") as store:
        run = store.create_run("loop", model="llama", config={"hours": 1})
        k = store.add_kernel("llama.rmsnorm", "rmsnorm", model="llama", share=0.1)
        with pytest.raises(StoreError, match="already exists"):
            store.add_kernel("llama.rmsnorm", "rmsnorm")
        e1 = store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", status="baseline",
                                  latency_us=10.0)
        e2 = store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", status="kept",
                                  latency_us=8.0)
        e3 = store.add_experiment(run_id=run.id, kernel_id=k.id, kernel_type="rmsnorm", status="running")
        assert (e1.number, e2.number, e3.number) == (1, 2, 3)
        with pytest.raises(StoreError):
            store.add_experiment(run_id=run.id, number=2, kernel_type="rmsnorm")
        assert store.best_experiment(k.id).id == e2.id
        assert store.abandon_running(run.id) == 1
        assert store.get_experiment(e3.id).status == "abandoned"
        assert store.update_experiment(e1.id, description="starter").description == "starter"
        with pytest.raises(StoreError, match="no column"):
            store.update_experiment(e1.id, not_a_column=1)
        with pytest.raises(NotFoundError):
            store.get_run(999)
        with pytest.raises(NotFoundError):
            store.get_kernel("nope")
        assert store.finish_run(run.id).status == "finished"
        assert store.latest_run("loop").id == run.id


def test_store_module_does_not_import_torch(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from autokernel.store import Store; Store(sys.argv[1]).close(); "
            "print('torch' in sys.modules)")
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ak.db")], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": pythonpath(root)}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


def test_copy_of_an_open_store_is_usable(tmp_path):
    # a store copied while closed (e.g. from the GPU machine) opens elsewhere
    db = tmp_path / "ak.db"
    with Store(db) as store:
        store.create_run("bench")
    other = tmp_path / "copy" / "ak.db"
    other.parent.mkdir()
    shutil.copy(db, other)
    with Store(other) as store:
        assert len(store.list_runs()) == 1
