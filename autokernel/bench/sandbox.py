"""Where judge children run: on Linux inside a sandbox, elsewhere (or where the kernel refuses user
namespaces) as a plain child with a scrubbed environment, and every result says which.

The sandbox is util-linux `unshare` (user, network, pid and mount namespaces) followed by
sandbox_enter.py: no network at all (not even the loopback), a /proc that shows only the sandbox's
own processes (the key-holding parent and its /proc/<pid>/environ are not there), and a file system
that is read-only everywhere but one scratch folder, its mounts locked so that root of the sandbox
cannot remount them. The store, the workspace, $HOME and every cache the main process reads
(/tmp/torchinductor_*, ~/.triton, AutoKernel's CUDA build cache) are out of reach; the child's own
caches (Triton, inductor, CUDA builds, kernel sources) live in the scratch folder, which persists
across runs so that compiled kernels stay warm.

    cmd, env, isolation = sandboxed([python, "-m", module], env)   # isolation.sandboxed, .detail
    probe() -> Isolation                                            # once per process

AUTOKERNEL_SANDBOX=0 turns the sandbox off (debugging); results then say so like any other
unsandboxed run.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SANDBOX_ENV = "AUTOKERNEL_SANDBOX"
ISOLATION_ENV = "AUTOKERNEL_ISOLATION"
UNSHARE_FLAGS = ("--user", "--map-root-user", "--net", "--pid", "--fork", "--mount", "--mount-proc")
PROBE_TIMEOUT_S = 30.0
UNSANDBOXED = "none: the candidate runs with its environment scrubbed of credentials only"


@dataclass(frozen=True)
class Isolation:
    sandboxed: bool
    detail: str  # one line, recorded on every result and experiment

    def warning(self) -> str | None:
        """What to tell the user once per run when candidates are not sandboxed."""
        if self.sandboxed:
            return None
        return ("candidates are NOT sandboxed: they can reach the network, read other processes' "
                f"environments and write files ({self.detail})")


def scratch_dir() -> Path:
    """The sandbox's one writable folder: ~/.cache/autokernel-sandbox (or $XDG_CACHE_HOME's), else
    a per-user folder in the system temp dir."""
    roots = [os.environ.get("XDG_CACHE_HOME"), os.path.join(os.path.expanduser("~"), ".cache")]
    for root in roots:
        if not root:
            continue
        path = Path(root) / "autokernel-sandbox"
        try:
            path.mkdir(parents=True, exist_ok=True)
            if os.access(path, os.W_OK):
                return path.resolve()
        except OSError:
            continue
    path = Path(tempfile.gettempdir()) / f"autokernel-sandbox-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def protected_paths() -> list[str]:
    """What the candidate must not be able to write: the AutoKernel home (store, workspace), $HOME
    and the working directory."""
    from autokernel.config import resolve_home

    paths = {str(resolve_home().home), os.path.expanduser("~"), os.getcwd()}
    return sorted(p for p in paths if p and p != "/")


def scratch_env(scratch: Path) -> dict[str, str]:
    """Every cache and temp location the child's libraries use, inside the scratch folder."""
    env = {"HOME": scratch / "home", "TMPDIR": scratch / "tmp", "XDG_CACHE_HOME": scratch / "home" / ".cache",
           "TRITON_CACHE_DIR": scratch / "triton", "TORCHINDUCTOR_CACHE_DIR": scratch / "inductor",
           "TORCH_EXTENSIONS_DIR": scratch / "torch_extensions", "CUDA_CACHE_PATH": scratch / "nv",
           "AUTOKERNEL_CACHE_DIR": scratch / "autokernel"}
    for p in env.values():
        p.mkdir(parents=True, exist_ok=True)
    out = {k: str(v) for k, v in env.items()}
    out["PYTHONDONTWRITEBYTECODE"] = "1"  # the installed packages are read-only in there
    return out


def _enter_argv(scratch: Path, tail: list[str]) -> list[str]:
    spec = json.dumps({"scratch": str(scratch), "protect": protected_paths()})
    return [shutil.which("unshare") or "unshare", *UNSHARE_FLAGS, "--", sys.executable, "-m",
            "autokernel.bench.sandbox_enter", spec, *tail]


def importable_env(env: dict[str, str]) -> dict[str, str]:
    """The child must import this autokernel, whatever its working directory."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(env)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@functools.lru_cache(maxsize=None)
def probe() -> Isolation:
    """Can children be sandboxed here? Sets one up and checks it from inside (cached per process)."""
    if os.environ.get(SANDBOX_ENV, "1").lower() in ("0", "off", "false", "no"):
        return Isolation(False, f"{UNSANDBOXED} (turned off by {SANDBOX_ENV}=0)")
    if not sys.platform.startswith("linux"):
        return Isolation(False, f"{UNSANDBOXED} (the sandbox needs Linux namespaces; this is {sys.platform})")
    if shutil.which("unshare") is None:
        return Isolation(False, f"{UNSANDBOXED} (util-linux `unshare` is not installed)")
    from autokernel.bench.isolation import clean_env

    try:
        scratch = scratch_dir()
        env = importable_env({**clean_env(), **scratch_env(scratch)})
        done = subprocess.run(_enter_argv(scratch, ["--check"]), capture_output=True, env=env,
                              timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(False, f"{UNSANDBOXED} (the sandbox did not start: {exc})")
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        verdict = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = done.stderr.decode(errors="replace").strip().splitlines()
        why = tail[-1] if tail else f"exit status {done.returncode}"
        return Isolation(False, f"{UNSANDBOXED} (the sandbox did not start: {why[:200]})")
    if not verdict.get("ok"):
        return Isolation(False, f"{UNSANDBOXED} ({verdict.get('isolation', 'the sandbox check failed')})")
    return Isolation(True, verdict["isolation"])


def sandboxed(argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str], Isolation]:
    """The command and environment that run `argv` in the sandbox (when this machine has one), and
    what isolation the child gets. `env` is already scrubbed (isolation.clean_env)."""
    iso = probe()
    env = importable_env(env)
    if not iso.sandboxed:
        return list(argv), env, iso
    scratch = scratch_dir()
    env.update(scratch_env(scratch))
    return _enter_argv(scratch, ["--", *argv]), env, iso


def isolation_here() -> str | None:
    """Inside a judge child: the sandbox's line, or None when the child is not sandboxed."""
    return os.environ.get(ISOLATION_ENV)
