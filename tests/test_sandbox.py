"""The sandbox around judge children: a candidate that tries to read the LLM key from any
/proc/<pid>/environ, open a socket to 127.0.0.1 or write into the store, the workspace or $HOME
reaches none of them, in the bench and in the KernelBench judge; without the sandbox the same probe
reaches all three (so the probe can fail), and every result records which isolation it had.

The judge is started from a child Python whose *initial* environment holds the key, as a user's
shell would start `autokernel` (a key set later with putenv never shows in /proc/<pid>/environ)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from autokernel.bench.sandbox import probe

CHEATS = Path(__file__).parent / "cheats"
ROOT = Path(__file__).resolve().parents[1]

needs_sandbox = pytest.mark.skipif(not probe().sandboxed, reason=f"no sandbox on this machine: {probe().detail}")


@pytest.fixture
def listener():
    """A real TCP server on 127.0.0.1 that accepts and closes connections."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                srv.accept()[0].close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    srv.close()


def probe_source(text: str, secret: str, port: int, targets: list[str]) -> str:
    """A probe kernel file with tests/cheats/reach.py spliced in at its `# reach.py` line and the
    test's key, port and targets filled in."""
    reach = (CHEATS / "reach.py").read_text().split('"""', 2)[2]  # without its docstring
    reach = re.sub(r'^SECRET = .*$', f"SECRET = {secret!r}", reach, count=1, flags=re.M)
    reach = re.sub(r'^PORT = .*$', f"PORT = {port}", reach, count=1, flags=re.M)
    reach = re.sub(r'^TARGETS = .*$', f"TARGETS = {targets!r}", reach, count=1, flags=re.M)
    assert text.count("\n# reach.py\n") == 1
    return text.replace("\n# reach.py\n", "\n" + reach + "\n")


def _judge_from_a_keyed_process(tmp_path, home, what: str, source: str, secret: str, sandbox: bool) -> dict:
    """Run the judge from a fresh Python whose initial environment holds the key; its result."""
    script = textwrap.dedent(f"""
        import json, sys
        source = open({str(tmp_path / 'cand.py')!r}).read()
        if {what!r} == "bench":
            from autokernel.bench import bench_file
            res = bench_file(source=source, quick=True, timeout_s=120)
        else:
            from autokernel.kb.evaluate import evaluate_once
            from autokernel.kb.problems import load_problems
            prob = load_problems("checkout", {str(CHEATS / 'kb')!r}, level=1)[0]
            res = evaluate_once(prob, source, timeout_s=120, timing=False)
        print(json.dumps({{"outcome": res.outcome, "error": res.error, "isolation": res.extra.get("isolation")}}))
    """)
    (tmp_path / "cand.py").write_text(source)
    env = {**os.environ, "OPENAI_API_KEY": secret, "AUTOKERNEL_HOME": str(home.home),
           "PYTHONPATH": str(ROOT), "AUTOKERNEL_SANDBOX": "1" if sandbox else "0"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def targets(home, tmp_path, monkeypatch):
    """A real store and workspace in the test's home, and a stand-in $HOME."""
    from autokernel.store import Store
    from autokernel.workspace import Workspace

    with Store(home.db):
        pass
    Workspace.open(home)
    user_home = tmp_path / "userhome"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    return [str(home.db), str(home.workspace), str(user_home)]


def _source(what: str, secret: str, port: int, targets: list[str]) -> str:
    name = "bench/sandbox_probe.py" if what == "bench" else "kb/sandbox_probe.py"
    return probe_source((CHEATS / name).read_text(), secret, port, targets)


@needs_sandbox
@pytest.mark.timeout(600)
@pytest.mark.parametrize("what", ["bench", "kb"])
def test_sandboxed_candidate_reaches_nothing(what, tmp_path, home, targets, listener):
    secret = "sk-planted-" + os.urandom(6).hex()
    res = _judge_from_a_keyed_process(tmp_path, home, what, _source(what, secret, listener, targets), secret, True)
    assert res["outcome"] == "correct", res["error"]
    assert res["isolation"].startswith("sandbox: no network")
    assert not (Path(targets[2]) / "planted.txt").exists() and not (Path(targets[1]) / "planted.txt").exists()
    assert b"planted" not in Path(targets[0]).read_bytes()


@pytest.mark.timeout(600)
def test_without_the_sandbox_the_probe_reaches_everything_and_the_result_says_so(tmp_path, home, targets, listener):
    """The probe is real: with the sandbox off it reads the key, connects and writes; the result
    records that the candidate ran unsandboxed."""
    secret = "sk-planted-" + os.urandom(6).hex()
    res = _judge_from_a_keyed_process(tmp_path, home, "bench", _source("bench", secret, listener, targets), secret,
                                      False)
    assert res["outcome"] == "crashed"
    assert re.search(r"read the key from /proc/\d+/environ", res["error"]), res["error"]
    assert f"connected to 127.0.0.1:{listener}" in res["error"] and "autokernel.db" in res["error"]
    assert res["isolation"].startswith("none:") and "AUTOKERNEL_SANDBOX=0" in res["isolation"]


@needs_sandbox
def test_the_probe_checks_the_sandbox_from_inside():
    from autokernel.bench.sandbox import scratch_dir

    iso = probe()
    assert iso.sandboxed and iso.warning() is None
    assert "read-only file system except the scratch folder" in iso.detail
    assert scratch_dir().is_dir()


def test_unsandboxed_isolation_warns(monkeypatch):
    from autokernel.bench import sandbox

    monkeypatch.setenv("AUTOKERNEL_SANDBOX", "0")
    sandbox.probe.cache_clear()
    try:
        iso = sandbox.probe()
        assert not iso.sandboxed and "NOT sandboxed" in iso.warning()
        argv, env, got = sandbox.sandboxed(["python", "-c", "pass"], {"PATH": "/bin"})
        assert argv == ["python", "-c", "pass"] and got == iso and str(ROOT) in env["PYTHONPATH"]
    finally:
        monkeypatch.delenv("AUTOKERNEL_SANDBOX")
        sandbox.probe.cache_clear()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sandbox", [pytest.param(True, marks=needs_sandbox), False], ids=["sandboxed", "unsandboxed"])
def test_bench_cli_records_isolation_and_warns_once_without_it(home, run_cli, monkeypatch, sandbox):
    """Every experiment row says what isolation its candidate had; without the sandbox the CLI
    says so once, on stderr."""
    from autokernel.bench import sandbox as sb
    from autokernel.store import Store

    monkeypatch.setenv("AUTOKERNEL_SANDBOX", "1" if sandbox else "0")
    sb.probe.cache_clear()
    try:
        code, out, err = run_cli("bench", str(Path(__file__).parent / "faults" / "good.py"), "--quick")
    finally:
        monkeypatch.delenv("AUTOKERNEL_SANDBOX")
        sb.probe.cache_clear()
    assert code == 0, err
    assert err.count("NOT sandboxed") == (0 if sandbox else 1)
    with Store(home.db) as store:
        row = store.list_experiments()[-1]
    assert row.isolation.startswith("sandbox: no network" if sandbox else "none:"), row.isolation
