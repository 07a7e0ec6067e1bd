"""--home is obeyed everywhere: with $AUTOKERNEL_HOME unset, a command given --home writes its
store, workspace and caches (KernelBench problem copies, kernel sources, CUDA builds) under that
home and nowhere else: no ./.autokernel in the working directory, nothing in the user's home but
the sandbox's own scratch folder (bench/sandbox.py: it cannot live in the protected home)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from akfixtures import pythonpath

from autokernel.store import Store

ROOT = Path(__file__).resolve().parents[1]
GOOD = ROOT / "tests" / "faults" / "good.py"
SANDBOX_SCRATCH = Path(".cache") / "autokernel-sandbox"


def _files(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")}


@pytest.mark.timeout(600)
def test_commands_given_home_write_nothing_elsewhere(tmp_path):
    home, cwd, user = tmp_path / "h", tmp_path / "cwd", tmp_path / "user"
    cwd.mkdir()
    user.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOKERNEL_HOME", "AUTOKERNEL_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(user), PYTHONPATH=pythonpath(ROOT), TRITON_INTERPRET="1")

    def cli(*args: str) -> subprocess.CompletedProcess:
        got = subprocess.run([sys.executable, "-m", "autokernel", "--home", str(home), *args], capture_output=True,
                             text=True, env=env, cwd=cwd, timeout=300)
        assert got.returncode == 0, got.stderr[-3000:]
        return got

    # the KB compiler imports the problem (a copy under the cache) and its judge child does too
    cli("kb", "run", "--source", "sample", "--level", "1", "--problems", "1", "-k", "0", "--json")
    # a judge child outside the sandbox uses the AutoKernel cache itself
    env["AUTOKERNEL_SANDBOX"] = "0"
    cli("bench", str(GOOD), "--quick", "--shape", "5x300", "--timeout", "120")

    assert _files(cwd) == set()  # no ./.autokernel
    assert not (user / ".autokernel").exists()
    left = {p for p in _files(user) if SANDBOX_SCRATCH not in (p, *p.parents)}
    assert left <= {Path(".cache")}, sorted(map(str, left))
    sources = list((home / "cache" / "kb_sources").glob("kb_problem_*.py"))
    assert sources and "class Model" in sources[0].read_text()
    with Store(home / "autokernel.db") as store:
        assert sorted(r.kind for r in store.list_runs()) == ["bench", "kb"]


def test_the_cli_home_reaches_code_handed_no_paths(tmp_path, monkeypatch, run_cli):
    """use_home: the cache, the kernel-source copies and the sandbox's protected paths follow
    --home; the environment is put back when the command ends."""
    from autokernel.bench.sandbox import protected_paths
    from autokernel.config import cache_dir, resolve_home, use_home
    from autokernel.kernelfile import import_kernel, parse_source

    monkeypatch.delenv("AUTOKERNEL_HOME", raising=False)
    monkeypatch.delenv("AUTOKERNEL_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    paths = resolve_home(tmp_path / "h")
    restore = use_home(paths)
    try:
        assert cache_dir() == paths.cache and resolve_home() == paths
        assert str(paths.home) in protected_paths()
        kf = parse_source(GOOD.read_text())  # no path of its own: imported from a copy in the cache
        import_kernel(kf)
        assert (paths.cache / "kernel_sources" / f"k_{kf.source_hash}.py").read_text() == kf.source
    finally:
        restore()
    assert "AUTOKERNEL_HOME" not in os.environ
    assert cache_dir(paths) == paths.cache
    assert not (tmp_path / ".autokernel").exists()

    code, out, err = run_cli("--home", str(tmp_path / "h2"), "report", "--format", "json")
    assert code == 0 and out == "[]\n", err
    assert "AUTOKERNEL_HOME" not in os.environ and not (tmp_path / ".autokernel").exists()
