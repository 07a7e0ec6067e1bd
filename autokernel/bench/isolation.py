"""The bench child's environment and process handling: no credentials, own process group.

Candidate code is untrusted (an LLM may have written it), so the child never sees API keys,
and everything it starts (ninja, nvcc, stray threads) dies with its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Mapping

_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "HF_", "HUGGING_FACE_", "AWS_", "GITHUB_")
# HF_ variables that are paths or switches, not credentials; the child may need them offline.
_HF_KEEP = ("HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_DATASETS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY")


def is_secret(name: str) -> bool:
    upper = name.upper()
    if upper in _HF_KEEP:
        return False
    return any(m in upper for m in _SECRET_MARKERS) or upper.startswith(_SECRET_PREFIXES)


def clean_env(base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the bench child: the caller's minus anything that looks like a credential."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not is_secret(k)}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it was started in a new session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"
