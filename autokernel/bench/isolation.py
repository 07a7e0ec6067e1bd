"""The bench child's environment and process handling: no credentials, own process group.

Candidate code is untrusted (an LLM may have written it), so the child never sees API keys,
and everything it starts (ninja, nvcc, stray threads) dies with its process group. The child's
environment is built from an allowlist (what Python, torch, Triton, CUDA and the BLAS libraries
read), from which anything that looks like a credential is removed again; sandbox.py adds the
namespaces around it.
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
# What a judge child may inherit: everything else (proxies, tokens under unusual names, the LLM
# endpoint's settings, the user's shell state) stays behind.
_KEEP = {"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "TMPDIR", "LD_LIBRARY_PATH",
         "LD_PRELOAD", "VIRTUAL_ENV", "CONDA_PREFIX", "CC", "CXX", "MAX_JOBS", "XDG_CACHE_HOME", *_HF_KEEP}
_KEEP_PREFIXES = ("PYTHON", "TRITON_", "CUDA_", "NVIDIA_", "NVCC_", "TORCH", "PYTORCH_", "LC_", "AUTOKERNEL_",
                  "OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "CUBLAS", "CUDNN_", "NCCL_")


def is_secret(name: str) -> bool:
    upper = name.upper()
    if upper in _HF_KEEP:
        return False
    return any(m in upper for m in _SECRET_MARKERS) or upper.startswith(_SECRET_PREFIXES)


def inherited(name: str) -> bool:
    """Whether a judge child gets the caller's variable `name`."""
    return (name in _KEEP or name.startswith(_KEEP_PREFIXES)) and not is_secret(name) \
        and not name.startswith("AUTOKERNEL_LLM")


def clean_env(base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for the bench child: the caller's allowlisted variables, none that looks
    like a credential."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if inherited(k)}
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
