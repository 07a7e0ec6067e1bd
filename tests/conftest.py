"""Shared test set-up: interpreter mode without a GPU, a temporary AutoKernel home, the CLI in-process."""

from __future__ import annotations

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Triton kernels run on the CPU through the interpreter; this must be set before triton.jit runs.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    """With AUTOKERNEL_TEST_FAILURES=FILE, each failure's report is appended to FILE as it happens:
    a device call cut off at its time limit still says why its tests failed."""
    path = os.environ.get("AUTOKERNEL_TEST_FAILURES")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"\n===== {report.nodeid} ({report.when})\n{report.longreprtext}\n")


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh AutoKernel home for one test, also exported for subprocesses."""
    from autokernel.config import resolve_home

    h = tmp_path / "akhome"
    monkeypatch.setenv("AUTOKERNEL_HOME", str(h))
    return resolve_home(h).ensure()


@pytest.fixture
def run_cli(capsys):
    """Run `autokernel ARGS` in-process; returns (exit_code, stdout, stderr)."""
    from autokernel.cli.app import main

    def _run(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run
