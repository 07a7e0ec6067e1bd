"""Where AutoKernel keeps its state: one home directory holding the database and the workspace."""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from autokernel.errors import ConfigError

HOME_ENV = "AUTOKERNEL_HOME"
READ_ONLY_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)  # what writing into a read-only place raises
DEFAULT_HOME = ".autokernel"


@dataclass(frozen=True)
class Paths:
    """All locations derived from the home directory; nothing else decides a path."""

    home: Path

    @property
    def db(self) -> Path:
        return self.home / "autokernel.db"

    @property
    def studies(self) -> Path:
        """The search's Optuna studies (a journal file), one per kernel, dtype and declared space."""
        return self.home / "studies.journal"

    @property
    def workspace(self) -> Path:
        return self.home / "workspace"

    @property
    def worktrees(self) -> Path:
        return self.home / "worktrees"

    @property
    def cache(self) -> Path:
        return self.home / "cache"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    def ensure(self) -> "Paths":
        try:
            for p in (self.home, self.cache, self.logs):
                p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            if exc.errno in READ_ONLY_ERRNOS and self.home.is_dir():
                raise ConfigError(f"the AutoKernel home {self.home} is read-only ({exc.strerror}: {exc.filename})",
                                  hint="make it writable, or choose another with --home DIR or $AUTOKERNEL_HOME"
                                  ) from exc
            raise ConfigError(f"cannot create the AutoKernel home {self.home}: {exc.strerror}") from exc
        return self


def resolve_home(explicit: str | os.PathLike | None = None) -> Paths:
    """--home wins over $AUTOKERNEL_HOME, which wins over ./.autokernel."""
    raw = explicit or os.environ.get(HOME_ENV) or DEFAULT_HOME
    home = Path(raw).expanduser().resolve()
    if home.exists() and not home.is_dir():
        raise ConfigError(f"AutoKernel home {home} exists and is not a directory")
    return Paths(home)


def use_home(paths: Paths) -> Callable[[], None]:
    """Make `paths` this process's AutoKernel home until the returned function is called (it puts
    the environment back). The CLI calls it with --home's Paths: code that is handed no Paths
    resolves the same home through $AUTOKERNEL_HOME (a kernel file's load_extension, a KernelBench
    problem imported by the compiler, the sandbox's protected paths), and so does every child
    process (bench and KernelBench workers, pool judges), which inherits the environment."""
    before = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(paths.home)

    def restore() -> None:
        if before is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = before

    return restore


CACHE_ENV = "AUTOKERNEL_CACHE_DIR"


# The homes of the live autokernel.apply() handles, newest last: (handle token, Paths).
_BOUND_CACHES: list[tuple[object, Paths]] = []


def bind_cache(paths: Paths) -> Callable[[], None]:
    """Make `paths`' cache the one cache_dir() answers until the returned function is called.
    autokernel.apply(home=...) binds its home for as long as its kernels stay in the model: a CUDA
    kernel file builds its extension at its first call (load_extension, handed no Paths), and that
    build belongs under the home the user gave, not $AUTOKERNEL_HOME or ./.autokernel. Unlike
    use_home it leaves the environment alone (a library call must not change the process's home);
    with several live handles the newest wins, and releasing them in any order is safe."""
    token = object()
    _BOUND_CACHES.append((token, paths))

    def release() -> None:
        _BOUND_CACHES[:] = [entry for entry in _BOUND_CACHES if entry[0] is not token]

    return release


def cache_dir(paths: Paths | None = None) -> Path:
    """Where kernel sources and builds are cached: the given home's; else that of the newest live
    autokernel.apply() handle (bind_cache); else $AUTOKERNEL_CACHE_DIR (a judge child in the
    sandbox, whose AutoKernel home is read-only, gets its scratch folder there); else the home
    resolve_home() finds (the CLI's --home, see use_home)."""
    if paths is not None:
        return paths.cache
    if _BOUND_CACHES:
        return _BOUND_CACHES[-1][1].cache
    raw = os.environ.get(CACHE_ENV)
    return Path(raw) if raw else resolve_home().cache


def debug_enabled() -> bool:
    return os.environ.get("AUTOKERNEL_DEBUG", "") not in ("", "0", "false", "no")
