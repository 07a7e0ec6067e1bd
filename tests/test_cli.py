"""The command-line surface: --help, --version, the home directory, typed errors and exit codes."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from akfixtures import fill_store, pythonpath

from autokernel import __version__
from autokernel.cli.app import app
from autokernel.errors import NotFoundError, SchemaTooNewError, StoreError
from autokernel.store import Store

ROOT = Path(__file__).resolve().parents[1]
FLOW = ("profile", "extract", "bench", "loop", "verify", "show", "export", "kb", "report")



def _registered() -> list[str]:
    names = [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]
    return [n for n in names if n]


def _cli(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": pythonpath(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "autokernel", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=180)


def test_help_lists_exactly_the_commands_that_exist(run_cli):
    code, out, _ = run_cli("--help")
    assert code == 0
    registered = _registered()
    assert "report" in registered and len(registered) == len(set(registered))
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("│ ") and len(line.split()) > 1
              and line.split()[1] in FLOW]
    assert "report" in listed
    assert sorted(listed) == sorted(n for n in registered if n in FLOW)
    # flow order: profile -> extract -> bench -> loop -> verify -> export -> kb -> report
    assert listed == sorted(listed, key=FLOW.index)
    for name in FLOW:
        if name not in registered:
            assert f"│ {name} " not in out  # never show a command that does not exist


def test_no_arguments_shows_help(run_cli):
    code, out, err = run_cli()
    assert "Usage" in out + err and "report" in out + err


def test_version(run_cli):
    code, out, _ = run_cli("--version")
    assert (code, out.strip()) == (0, f"autokernel {__version__}")


def test_version_through_python_m():
    res = _cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"autokernel {__version__}"


def test_every_format_on_empty_and_filled_store(home, run_cli):
    empty = {}
    for fmt in ("tsv", "csv", "json", "md"):
        code, out, _ = run_cli("report", "--format", fmt)
        assert code == 0
        empty[fmt] = out
    assert empty["tsv"].count("\n") == 1 and empty["csv"].count("\n") == 1 and empty["json"] == "[]\n"
    fill_store(home.db)
    for fmt in ("tsv", "csv", "json", "md"):
        code, out, _ = run_cli("report", "--format", fmt)
        assert code == 0 and out != empty[fmt]
        assert "llama.rmsnorm" in out or "rmsnorm-e2" in out


def test_home_option_and_env_are_respected(tmp_path, monkeypatch, run_cli):
    env_home = tmp_path / "from_env"
    opt_home = tmp_path / "from_option"
    opt_home.mkdir()
    fill_store(opt_home / "autokernel.db")
    monkeypatch.setenv("AUTOKERNEL_HOME", str(env_home))
    # $AUTOKERNEL_HOME: an empty home, header only
    code, out, _ = run_cli("report")
    assert code == 0 and out.count("\n") == 1
    # --home wins over the environment
    code, out, _ = run_cli("--home", str(opt_home), "report")
    assert code == 0 and out.count("\n") == 8
    # and the environment alone is enough when it points at the filled home
    monkeypatch.setenv("AUTOKERNEL_HOME", str(opt_home))
    code, out, _ = run_cli("report", "--format", "json")
    assert code == 0 and '"rmsnorm-e2"' in out


def test_default_home_is_dot_autokernel_in_cwd(tmp_path):
    (tmp_path / ".autokernel").mkdir()
    fill_store(tmp_path / ".autokernel" / "autokernel.db")
    env = {k: v for k, v in os.environ.items() if k != "AUTOKERNEL_HOME"}
    res = subprocess.run([sys.executable, "-m", "autokernel", "report"], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": pythonpath(ROOT)}, cwd=tmp_path, timeout=180)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("\n") == 8


def test_home_that_is_a_file_is_a_config_error(tmp_path, run_cli):
    f = tmp_path / "file"
    f.write_text("x")
    code, out, err = run_cli("--home", str(f), "report")
    assert code == 4 and "not a directory" in err and err.strip().count("\n") == 0


@pytest.mark.parametrize("case", ["not_found", "corrupt", "too_new"])
def test_typed_errors_are_one_line_with_their_exit_code(case, home, run_cli):
    if case == "not_found":
        Store(home.db).close()
        args, expected = ("report", "--run", "42"), NotFoundError
    elif case == "corrupt":
        home.db.write_bytes(b"this is not a database" * 100)
        args, expected = ("report",), StoreError
    else:
        Store(home.db).close()
        conn = sqlite3.connect(home.db)
        conn.execute("INSERT INTO schema_migrations(version, name) VALUES (999, 'future')")
        conn.commit()
        conn.close()
        args, expected = ("report",), SchemaTooNewError
    code, out, err = run_cli(*args)
    assert code == expected.exit_code
    assert out == ""
    assert err.startswith("error: ") and err.strip().count("\n") == 0
    assert "Traceback" not in err


def test_exit_codes_are_distinct():
    from autokernel import errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.AutoKernelError)]
    codes = [c.exit_code for c in classes]
    assert len(codes) == len(set(codes)) and min(codes) > 2


def test_debug_shows_a_traceback(tmp_path):
    env = {"AUTOKERNEL_HOME": str(tmp_path / "home")}
    plain = _cli("report", "--run", "5", env={**env, "AUTOKERNEL_DEBUG": "0"})
    assert plain.returncode == NotFoundError.exit_code
    assert "Traceback" not in plain.stderr and plain.stderr.strip().count("\n") == 0
    debug = _cli("report", "--run", "5", env={**env, "AUTOKERNEL_DEBUG": "1"})
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr and "NotFoundError" in debug.stderr


def _read_only(home: Path, *args: str) -> subprocess.CompletedProcess:
    """`autokernel ARGS` with `home` mounted read-only (a private mount namespace: root's writes are
    refused too, which a chmod would not do)."""
    probe = subprocess.run(["unshare", "-r", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no unprivileged mount namespace here (unshare -r -m)")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    env = {**os.environ, "PYTHONPATH": pythonpath(ROOT), "AUTOKERNEL_HOME": str(home)}
    return subprocess.run(["unshare", "-r", "-m", "sh", "-c", script, str(home), sys.executable, "-m", "autokernel",
                           *args], capture_output=True, text=True, env=env, timeout=180)


def test_a_read_only_home_or_store_is_named_as_such(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    fill_store(home / "autokernel.db")
    before = (home / "autokernel.db").read_bytes()
    res = _read_only(home, "report")  # an intact store in a read-only folder
    assert res.returncode == StoreError.exit_code, res.stderr
    assert "is read-only" in res.stderr and "damaged" not in res.stderr
    assert res.stderr.strip().count("\n") == 0
    res = _read_only(home, "loop", "--model", "llama-tiny")  # a home that exists but cannot be written
    assert res.returncode == 4 and "the AutoKernel home" in res.stderr and "is read-only" in res.stderr
    assert "cannot create" not in res.stderr
    assert (home / "autokernel.db").read_bytes() == before
